"""A client of flowcd's web front (docs/web-ui.md) for the web tests and
scripts/web-screenshots.py: the URL and token from `flowc status --json`,
JSON GETs, the SSE stream, and response checks against docs/api.yaml."""
import json
import pathlib
import urllib.error
import urllib.parse
import urllib.request

import jsonschema
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = yaml.safe_load((ROOT / "docs" / "api.yaml").read_text())


class Web:
    def __init__(self, url_with_token: str):
        parsed = urllib.parse.urlsplit(url_with_token)
        self.base = f"{parsed.scheme}://{parsed.netloc}"
        self.token = urllib.parse.parse_qs(parsed.query)["token"][0]
        self.url_with_token = url_with_token

    @classmethod
    def of(cls, flowc):
        status = json.loads(flowc.run("status", "--json").stdout)
        assert status["http_url"].startswith("http://127.0.0.1:"), status
        return cls(status["http_url"])

    def request(self, path, token=True, headers=None):
        headers = dict(headers or {})
        if token:
            headers["Authorization"] = "Bearer " + self.token
        return urllib.request.Request(self.base + path, headers=headers)

    def get(self, path, token=True):
        """(status, content type, body bytes); HTTP errors are answers too."""
        try:
            with urllib.request.urlopen(self.request(path, token), timeout=30) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read()

    def json(self, path, schema=None, status=200):
        code, kind, body = self.get(path)
        assert code == status, (path, code, body[:500])
        assert kind.startswith("application/json"), (path, kind)
        value = json.loads(body)
        if schema:
            check(value, schema)
        return value

    def events(self, timeout=120, path="/api/events"):
        """The SSE stream: yields (event, data) pairs as they arrive."""
        response = urllib.request.urlopen(self.request(path), timeout=timeout)
        assert response.headers["Content-Type"].startswith("text/event-stream")
        event, data = None, []
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and event:
                yield event, json.loads("\n".join(data))
                event, data = None, []


def check(value, schema_name):
    """`value` is valid against components/schemas/NAME of docs/api.yaml."""
    jsonschema.validate(value, {"$ref": f"#/components/schemas/{schema_name}",
                                "components": SPEC["components"]},
                        cls=jsonschema.Draft202012Validator)
