"""flowc's remote cache client (remote/, driven by build/bin/remote_cache_probe)
against real servers on loopback: nginx as a Bazel HTTP cache (WebDAV, with a
read-only location, bearer tokens, TLS) and BuildGrid 0.9.1 as a REAPI cache
(CAS + ActionCache + ByteStream). Round trips small, large and 1 GiB, misses,
tampered blobs, refused writes and credentials, a server killed mid-upload,
bad options.

  /work/main/.venv/bin/python -m pytest -q tests/remotecache/test_remote_cache_client.py
"""

import os
import time
from pathlib import Path

import pytest

from probe import Client, client_for, digest_of, digest_of_file
from probe import buildgrid_cache, nginx_cache, server  # noqa: F401 (fixtures)
from servers import BuildGridCache, NginxCache, digest_hex

MiB = 1 << 20
# Exit statuses (cli/Common.h): 2 usage, 3 bad input or data loss, 5 unavailable;
# Unauthenticated and PermissionDenied are 1 (flowc's "anything else").
EXIT_USAGE, EXIT_BAD_INPUT, EXIT_UNAVAILABLE, EXIT_OTHER = 2, 3, 5, 1


def write(path, data):
    path.write_bytes(data)
    return path


def patterned(size, seed=1):
    """Bytes that differ per seed and position (not all zeros, not periodic at 4 KiB)."""
    block = bytes((i * 131 + seed * 17) % 251 for i in range(65521))
    return (block * (size // len(block) + 1))[:size]


def sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)
    return path


# --- round trips ------------------------------------------------------------

def test_small_blob_round_trips(server, tmp_path):
    c = client_for(server)
    data = patterned(1000, seed=2)
    src = write(tmp_path / "small", data)
    d = digest_of(data)
    assert c.ok("find-missing", d)["missing"] == [d]
    c.ok("put-file", d, src)
    assert c.ok("find-missing", d)["missing"] == []
    got = c.ok("get-file", d, tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == data
    assert got["counters"]["bytes_downloaded"] == len(data)
    assert got["counters"]["blobs_streamed"] == 0


def test_empty_blob_is_always_there(server, tmp_path):
    # As REAPI has it: no request stores or fetches the empty blob.
    c = client_for(server)
    d = digest_of(b"")
    assert c.ok("find-missing", d)["missing"] == []
    assert c.ok("put-file", d, write(tmp_path / "empty", b""))["counters"]["requests"] == 0
    got = c.ok("get-file", d, tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == b""
    assert got["counters"]["requests"] == 0


def test_large_blob_goes_through_bytestream(server, tmp_path):
    # Over the 4 MiB batch limit: ByteStream Write and Read for gRPC (the
    # client's counters and BuildGrid's own log say so); one streamed PUT
    # and GET for http (nginx's access log says so).
    c = client_for(server)
    data = patterned(5 * MiB + 123, seed=3)
    src = write(tmp_path / "large", data)
    d = digest_of(data)
    up = c.ok("put-file", d, src)
    down = c.ok("get-file", d, tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == data
    assert up["counters"]["bytes_uploaded"] == len(data)
    hex_size = d.split(":")[1]
    if isinstance(server, BuildGridCache):
        assert up["counters"]["blobs_streamed"] == 1
        assert down["counters"]["blobs_streamed"] == 1
        streams = server.completed_streams()
        assert ("Write", hex_size) in streams and ("Read", hex_size) in streams, server.logs()
        assert "BatchUpdateBlobs" not in [m for m in server.requests()[-3:]]
    else:
        path = f"/cache/cas/{digest_hex(d)}"
        log = server.requests()
        assert ("PUT", path, 201) in log and ("GET", path, 200) in log


def test_entry_round_trips_and_a_miss_is_not_an_error(server, tmp_path):
    c = client_for(server)
    blobs = [patterned(100 + i, seed=10 + i) for i in range(2)]
    digests = [digest_of(b) for b in blobs]
    for i, b in enumerate(blobs):
        c.ok("put-file", digests[i], write(tmp_path / f"b{i}", b))
    key = digest_of(b"action key " + os.urandom(8))
    miss = c.ok("get-entry", key)
    assert miss["hit"] is False and miss["outputs"] == []
    c.ok("put-entry", key, f"artifact={digests[0]}", f"code/kernels.o={digests[1]}")
    hit = c.ok("get-entry", key)
    assert hit["hit"] is True
    assert hit["outputs"] == [{"path": "artifact", "digest": digests[0]},
                              {"path": "code/kernels.o", "digest": digests[1]}]


def test_find_missing_answers_in_input_order(server, tmp_path):
    c = client_for(server)
    present = [patterned(50 + i, seed=30 + i) for i in range(3)]
    for i, b in enumerate(present):
        c.ok("put-file", digest_of(b), write(tmp_path / f"p{i}", b))
    absent = [digest_of(os.urandom(64)) for _ in range(3)]
    order = [absent[2], digest_of(present[0]), absent[0], digest_of(present[2]), absent[1]]
    assert c.ok("find-missing", *order)["missing"] == [absent[2], absent[0], absent[1]]


def test_missing_blob_is_not_found(server, tmp_path):
    c = client_for(server)
    d = digest_of(os.urandom(100))
    r = c.run("get-file", d, tmp_path / "out")
    assert r.rc == EXIT_BAD_INPUT, r
    assert "NotFound" in r.stderr and d.split(":")[1][:16] in r.stderr
    assert not (tmp_path / "out").exists()


def test_capabilities(server):
    caps = client_for(server).ok("capabilities")
    assert caps["action_cache_writable"] is True
    assert caps["max_blob_bytes"] == 0


# --- a server that answers with the wrong bytes -----------------------------

@pytest.mark.parametrize("size", [4000, 6 * MiB], ids=["batch", "stream"])
def test_tampered_blob_is_data_loss(server, tmp_path, size):
    c = client_for(server)
    data = patterned(size, seed=40 + size % 7)
    d = digest_of(data)
    c.ok("put-file", d, write(tmp_path / "blob", data))
    server.tamper(d)
    r = c.run("get-file", d, tmp_path / "out")
    assert r.rc == EXIT_BAD_INPUT, r
    assert "DataLoss" in r.stderr and d in r.stderr and "tampered" in r.stderr, r
    # The probe removes what a failed download wrote; nothing half-used.
    assert not (tmp_path / "out").exists()


def test_upload_of_a_file_that_does_not_match_its_digest_stores_nothing(server, tmp_path):
    # The client hashes while it sends and holds back the last bytes of a
    # file that is not the digest's: nothing lands under the wrong name.
    c = client_for(server)
    claimed = patterned(6 * MiB, seed=50)
    actual = bytearray(claimed)
    actual[-1] ^= 0xFF
    d = digest_of(claimed)
    r = c.run("put-file", d, write(tmp_path / "changed", bytes(actual)))
    assert r.rc == EXIT_BAD_INPUT, r
    assert "InvalidArgument" in r.stderr and "hash to" in r.stderr, r
    assert c.ok("find-missing", d)["missing"] == [d]
    assert not server.blob_path(d).exists()


def test_stored_entry_that_does_not_parse_is_data_loss(nginx_cache, tmp_path):
    c = client_for(nginx_cache)
    key = digest_of(os.urandom(16))
    path = nginx_cache.entry_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xff\xff garbage, not an ActionResult")
    r = c.run("get-entry", key)
    assert r.rc == EXIT_BAD_INPUT, r
    assert "DataLoss" in r.stderr and "not a serialized ActionResult" in r.stderr, r


# --- refused writes and credentials ------------------------------------------

def test_read_only_endpoint_refuses_writes(nginx_cache, tmp_path):
    rw, ro = client_for(nginx_cache), Client(nginx_cache.ro_url)
    data = patterned(2000, seed=60)
    d = digest_of(data)
    src = write(tmp_path / "blob", data)
    r = ro.run("put-file", d, src)
    assert r.rc == EXIT_OTHER, r
    assert "PermissionDenied" in r.stderr and "HTTP 403" in r.stderr and "/ro/cas/" in r.stderr, r
    key = digest_of(os.urandom(16))
    r = ro.run("put-entry", key, f"artifact={d}")
    assert r.rc == EXIT_OTHER and "PermissionDenied" in r.stderr, r
    # Nothing was written: not on disk, and no successful PUT in the log.
    assert not nginx_cache.blob_path(d).exists()
    assert not nginx_cache.entry_path(key).exists()
    assert [x for x in nginx_cache.requests() if x[0] == "PUT" and x[1].startswith("/ro/")
            and 200 <= x[2] < 300] == []
    # Reads through the read-only endpoint work.
    rw.ok("put-file", d, src)
    ro.ok("get-file", d, tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == data


def test_read_only_action_cache_says_so_and_refuses_entries(tmp_path):
    # BuildGrid with allow-updates: false announces it in Capabilities
    # (what a daemon reads to go read-only) and refuses UpdateActionResult.
    server = BuildGridCache(tmp_path / "bgd-ro", allow_updates=False).start()
    try:
        c = client_for(server)
        assert c.ok("capabilities")["action_cache_writable"] is False
        data = patterned(100, seed=65)
        d = digest_of(data)
        c.ok("put-file", d, write(tmp_path / "blob", data))
        key = digest_of(os.urandom(16))
        r = c.run("put-entry", key, f"artifact={d}")
        assert r.rc == 4, r
        assert "Unimplemented" in r.stderr and "UpdateActionResult" in r.stderr, r
        assert c.ok("get-entry", key)["hit"] is False
    finally:
        server.stop()


@pytest.fixture(scope="module")
def token_nginx(tmp_path_factory):
    server = NginxCache(tmp_path_factory.mktemp("nginx-token"), token="s3cret-token").start()
    yield server
    server.stop()


def test_no_or_wrong_token_is_unauthenticated(token_nginx, tmp_path):
    data = patterned(300, seed=70)
    d = digest_of(data)
    src = write(tmp_path / "blob", data)
    key = digest_of(os.urandom(16))
    for options in ([], ["--header", "Authorization=Bearer wrong"]):
        c = Client(token_nginx.url, *options)
        for args in (("put-file", d, src), ("get-entry", key), ("find-missing", d)):
            r = c.run(*args)
            # Not a miss: a 401 is an error naming the cause.
            assert r.rc == EXIT_OTHER, (options, args, r)
            assert "Unauthenticated" in r.stderr and "HTTP 401" in r.stderr, r
    assert not token_nginx.blob_path(d).exists()
    good = Client(token_nginx.url, "--header", "Authorization=Bearer s3cret-token")
    good.ok("put-file", d, src)
    assert good.ok("get-entry", key)["hit"] is False


def test_instance_separates_entries_over_http(nginx_cache, tmp_path):
    data = patterned(500, seed=80)
    d = digest_of(data)
    tenant = Client(nginx_cache.url, "--instance", "tenant-a")
    tenant.ok("put-file", d, write(tmp_path / "blob", data))
    assert nginx_cache.blob_path(d, "tenant-a").exists()
    assert Client(nginx_cache.url, "--instance", "tenant-b").ok("find-missing", d)["missing"] == [d]


# --- TLS ---------------------------------------------------------------------

@pytest.fixture(scope="module", params=["nginx", "buildgrid"])
def mtls_server(request, tmp_path_factory):
    """Each server over TLS, requiring a client certificate from the test CA."""
    cls = NginxCache if request.param == "nginx" else BuildGridCache
    server = cls(tmp_path_factory.mktemp(f"{request.param}-mtls"), client_certs=True).start()
    yield server
    server.stop()


def test_tls_with_a_ca_file_and_a_client_certificate(mtls_server, tmp_path):
    data = patterned(700, seed=90)
    d = digest_of(data)
    pki = mtls_server.pki
    base = client_for(mtls_server)
    assert base.url.startswith(("https://", "grpcs://"))
    c = base.with_options("--ca", pki["ca"], "--cert", pki["client_cert"], "--key", pki["client_key"])
    c.ok("put-file", d, write(tmp_path / "blob", data))
    c.ok("get-file", d, tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == data
    # Without the CA the server is not trusted.
    r = base.run("find-missing", d)
    assert r.rc != 0 and "find-missing" not in r.stdout, r
    if isinstance(mtls_server, NginxCache):
        assert r.rc == EXIT_BAD_INPUT and "FailedPrecondition" in r.stderr and "CA file" in r.stderr, r
    else:
        assert r.rc == EXIT_UNAVAILABLE and "Unavailable" in r.stderr, r
    # Trusted, but without a client certificate: refused.
    r = base.with_options("--ca", pki["ca"]).run("find-missing", d)
    if isinstance(mtls_server, NginxCache):
        assert r.rc == EXIT_OTHER and "Unauthenticated" in r.stderr and "HTTP 401" in r.stderr, r
    else:
        # gRPC reports a refused handshake as UNAVAILABLE.
        assert r.rc == EXIT_UNAVAILABLE and "Unavailable" in r.stderr and mtls_server.url in r.stderr, r


def test_client_key_that_is_not_pem_is_refused(tmp_path):
    cert = write(tmp_path / "c.pem", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    key = write(tmp_path / "k.pem", b"not a key")
    for url in ("https://127.0.0.1:1/cache", "grpcs://127.0.0.1:1"):
        r = Client(url, "--cert", cert, "--key", key).run("capabilities")
        assert r.rc == EXIT_BAD_INPUT, r
        assert "remote cache client key" in r.stderr and "no PEM private key" in r.stderr, r


# --- a server that goes away -------------------------------------------------

def read_bytes_of(pid):
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@pytest.mark.parametrize("kind", ["nginx", "buildgrid"])
def test_server_killed_mid_upload_is_a_clean_unavailable(kind, tmp_path):
    server = (NginxCache if kind == "nginx" else BuildGridCache)(tmp_path / kind).start()
    try:
        big = sparse(tmp_path / "big", 2 << 30)
        d = digest_of_file(big)
        import subprocess
        proc = subprocess.Popen(client_for(server).command("put-file", d, big),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Killed once the probe has read 64 MiB of the file (it is sending).
        while read_bytes_of(proc.pid) < 64 * MiB and proc.poll() is None:
            time.sleep(0.005)
        assert proc.poll() is None, "the upload finished before the server could be killed"
        server.kill()
        # Bounded: retries with backoff end, nothing waits for the server.
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == EXIT_UNAVAILABLE, (out, err)
        assert "Unavailable" in err and server.url in err, err
        assert out == ""
    finally:
        server.kill()


def test_unreachable_server_is_unavailable(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for url in (f"http://127.0.0.1:{port}/cache", f"grpc://127.0.0.1:{port}"):
        r = Client(url, "--timeout-ms", "2000").run("get-entry", digest_of(b"k"))
        assert r.rc == EXIT_UNAVAILABLE, r
        assert "Unavailable" in r.stderr and f"127.0.0.1:{port}" in r.stderr, r


# --- size ------------------------------------------------------------------------

def test_gigabyte_blob_round_trips_in_flat_memory(server, tmp_path):
    # A 1 GiB blob (sparse for the upload; a real file for the download)
    # round-trips, and the probe's peak RSS is that of an 8 MiB one.
    c = client_for(server)
    small = write(tmp_path / "small", patterned(8 * MiB, seed=99))
    ds = digest_of_file(small)
    rss_small = max(c.ok("put-file", ds, small)["peak_rss_kb"],
                    c.ok("get-file", ds, tmp_path / "small.out")["peak_rss_kb"])
    big = sparse(tmp_path / "big", 1 << 30)
    d = digest_of_file(big)
    up = c.ok("put-file", d, big)
    down = c.ok("get-file", d, tmp_path / "big.out")
    assert digest_of_file(tmp_path / "big.out") == d
    assert down["counters"]["bytes_downloaded"] == 1 << 30
    # Not growing with size: well under the 1016 MiB more that a copy would cost.
    for result in (up, down):
        assert result["peak_rss_kb"] < rss_small + 32 * 1024, (rss_small, result)


# --- bad options -------------------------------------------------------------

@pytest.mark.parametrize("url,why", [
    ("ftp://127.0.0.1/cache", "scheme must be grpc://, grpcs://, http:// or https://"),
    ("grpc://127.0.0.1", "no port"),
    ("grpc://127.0.0.1:99999", "port must be a number in 1..65535"),
    ("http://127.0.0.1/cache?x=1", "path holds '?'"),
    ("http://127.0.0.1/../etc", "'..' segment"),
    ("http://u@127.0.0.1/cache", "unexpected '@' after the host"),
])
def test_bad_url_is_invalid_argument(url, why):
    r = Client(url).run("capabilities")
    assert r.rc == EXIT_BAD_INPUT, r
    assert "InvalidArgument" in r.stderr and why in r.stderr and url[:20] in r.stderr, r


@pytest.mark.parametrize("options,why", [
    (["--instance", "a//b"], "empty segment"),
    (["--instance", "blobs"], "reserved by REAPI"),
    (["--header", "Authorization=Bearer x\r\nX-Admin: 1"], "control or non-ASCII byte"),
    (["--header", "grpc-timeout=1S"], "gRPC's own"),
    (["--ca", "/nonexistent/ca.pem"], "given for the plaintext URL"),
    (["--timeout-ms", "0"], "timeout 0 ms"),
])
def test_bad_option_is_invalid_argument(options, why):
    r = Client("http://127.0.0.1:1/cache", *options).run("capabilities")
    assert r.rc == EXIT_BAD_INPUT, r
    assert "InvalidArgument" in r.stderr and why in r.stderr, r


def test_unreadable_tls_file_names_it(tmp_path):
    r = Client("https://127.0.0.1:1/cache", "--ca", tmp_path / "nope.pem").run("capabilities")
    assert r.rc == EXIT_BAD_INPUT, r
    assert "remote cache CA file" in r.stderr and "nope.pem': cannot be read" in r.stderr, r


def test_bad_digest_and_command_line(tmp_path):
    c = Client("http://127.0.0.1:1/cache")
    r = c.run("get-file", "sha256:abc/1", tmp_path / "out")
    assert r.rc == EXIT_BAD_INPUT and "InvalidArgument" in r.stderr and "sha256:abc/1" in r.stderr, r
    r = c.run("--bogus", "1", "capabilities")
    assert r.rc == EXIT_USAGE and "unknown option --bogus" in r.stderr, r
    r = c.run("frobnicate")
    assert r.rc == EXIT_BAD_INPUT and "unknown command 'frobnicate'" in r.stderr, r
