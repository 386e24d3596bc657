"""Regenerates docs/web-ui/*.png, the web UI's screenshots (docs/web-ui.md):
a daemon on a temp cache, the example models compiled (one twice, for a
hit; one with a search budget, for tuning records; a BERT-shaped encoder of
12 layers, for the model page), a bad model's failed job, then each page in
headless Chromium.

    .venv/bin/python scripts/web-screenshots.py [--out docs/web-ui]
"""
import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "examples")]

import make_models  # noqa: E402
from conftest import Flowc, save  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from test_progress import zero_strides_model  # noqa: E402
from test_web_browser import make_browser  # noqa: E402
from webclient import Web  # noqa: E402


def compile_examples(flowc, tmp):
    rng = np.random.default_rng(0)
    cnn = save(make_models.make_cnn(rng), tmp / "cnn.onnx")
    mlp = save(make_models.make_mlp(rng), tmp / "mlp.onnx")
    flowc.submit(cnn)
    flowc.submit(cnn, tmp / "again.fca")
    flowc.submit(mlp, None, "--search-budget", "10")
    flowc.submit(save(make_models.make_encoder(rng), tmp / "encoder.onnx"))
    flowc.run("submit", zero_strides_model(tmp / "bad.onnx"), "-o", tmp / "bad.fca",
              check=False)


def shoot(browser, url, wait_for, path):
    browser.get(url)
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, wait_for))
    time.sleep(0.5)  # let the plots draw
    browser.save_screenshot(str(path))
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "web-ui")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as directory:
        tmp = pathlib.Path(directory)
        flowc = Flowc(tmp)
        flowc.run("daemon", "start")
        browser = make_browser()
        try:
            compile_examples(flowc, tmp)
            web = Web.of(flowc)
            jobs = web.json("/api/jobs")["jobs"]
            done = next(j for j in jobs if j["state"] == "done")
            browser.get(web.url_with_token)
            shoot(browser, web.base + "/", "#jobs tr[data-job]", args.out / "jobs.png")
            shoot(browser, f"{web.base}/job.html?id={done['id']}", "#tasks tr td",
                  args.out / "job.png")
            shoot(browser, web.base + "/cache.html", "#hit-plot", args.out / "cache.png")
            shoot(browser, web.base + "/workers.html", "#local", args.out / "workers.png")
            shoot(browser, web.base + "/tuning.html", "nav a", args.out / "tuning.png")
            encoder = next(j for j in jobs if j["model"].endswith("encoder.onnx"))
            shoot(browser, f"{web.base}/model.html?digest={encoder['model_digest']}",
                  "#graph svg g.node", args.out / "model.png")
        finally:
            browser.quit()
            flowc.run("daemon", "stop", check=False)


if __name__ == "__main__":
    main()
