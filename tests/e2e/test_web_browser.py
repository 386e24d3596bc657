"""The web UI in a real browser: headless Chromium from Debian driven by
Selenium through Debian's chromium-driver (docs/web-ui.md). A job appears
and finishes on the jobs page through the live stream with no reload; a bad
model's job page names the node; the cache page's numbers are those of
`flowc cache stats --json`; every page renders without a script error."""
import json
import pathlib
import shutil
import threading

import numpy as np
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import make_models
from conftest import leaky_cnn, save
from test_progress import zero_strides_model
from webclient import Web

DRIVER = pathlib.Path("/usr/bin/chromedriver")
BROWSER = pathlib.Path("/usr/bin/chromium")


def make_browser():
    options = webdriver.ChromeOptions()
    options.binary_location = str(BROWSER)
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(str(DRIVER)), options=options)


@pytest.fixture
def browser():
    if not DRIVER.exists() or not BROWSER.exists():
        pytest.skip("Debian's chromium and chromium-driver are not installed "
                    "(scripts/setup.sh test installs them)")
    driver = make_browser()
    yield driver
    driver.quit()


def waiter(browser, seconds):
    """A wait that tries again when an element it found was replaced before
    it was read: the live pages re-render their tables as events arrive."""
    return WebDriverWait(browser, seconds,
                         ignored_exceptions=(StaleElementReferenceException,))


def script_errors(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_a_job_appears_and_finishes_live(flowc, tmp_path, browser):
    web = Web.of(flowc)
    browser.get(web.url_with_token)
    wait = waiter(browser, 60)
    wait.until(lambda d: d.find_element(By.ID, "live").text == "live")
    browser.execute_script("window.flowcNoReload = 42;")
    model = save(leaky_cnn(np.random.default_rng(11)), tmp_path / "live.onnx")
    submit = threading.Thread(target=flowc.submit, args=(model,))
    submit.start()
    row = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#jobs tr[data-job]"))[0]
    job_id = row.get_attribute("data-job")
    wait.until(lambda d: d.find_element(
        By.CSS_SELECTOR, f'#jobs tr[data-job="{job_id}"] td.state').text == "done")
    submit.join()
    assert browser.execute_script("return window.flowcNoReload;") == 42
    assert "live.onnx" in browser.find_element(By.CSS_SELECTOR,
                                               f'#jobs tr[data-job="{job_id}"]').text
    assert not script_errors(browser)

    browser.get(f"{web.base}/job.html?id={job_id}")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#tasks tr td"))
    assert "codegen" in browser.find_element(By.ID, "tasks").text
    assert not script_errors(browser)


def test_a_bad_models_job_page_names_the_node(flowc, tmp_path, browser):
    web = Web.of(flowc)
    bad = zero_strides_model(tmp_path / "bad.onnx")
    flowc.run("submit", bad, "-o", tmp_path / "bad.fca", check=False)
    job = web.json("/api/jobs")["jobs"][-1]
    browser.get(f"{web.url_with_token}")
    browser.get(f"{web.base}/job.html?id={job['id']}")
    error = waiter(browser, 30).until(lambda d: d.find_element(By.ID, "error"))
    waiter(browser, 30).until(lambda d: "conv0" in error.text)
    assert "strides" in error.text


def test_the_cache_page_shows_the_clis_numbers(flowc, tmp_path, browser):
    web = Web.of(flowc)
    model = save(make_models.make_cnn(np.random.default_rng(12)), tmp_path / "c.onnx")
    flowc.submit(model)
    flowc.submit(model, tmp_path / "again.fca")
    cli = json.loads(flowc.run("cache", "stats", "--json").stdout)
    browser.get(web.url_with_token)
    browser.get(f"{web.base}/cache.html")
    wait = waiter(browser, 30)
    wait.until(lambda d: d.find_element(By.ID, "bytes").get_attribute("data-value"))
    fields = {"bytes": "bytes", "max-bytes": "max_bytes", "blobs": "blobs",
              "actions": "actions", "hits": "hits", "misses": "misses",
              "evictions": "evictions", "evicted-bytes": "evicted_bytes",
              "dedup-bytes": "dedup_bytes"}
    for element, key in fields.items():
        shown = browser.find_element(By.ID, element).get_attribute("data-value")
        assert int(shown) == cli[key], (element, shown, cli[key])
    rate = float(browser.find_element(By.ID, "hit-rate").get_attribute("data-value"))
    assert abs(rate - cli["hit_rate"]) < 1e-9
    assert browser.find_elements(By.CSS_SELECTOR, "#kinds tr")
    assert browser.find_elements(By.ID, "hit-plot")
    assert not script_errors(browser)


def test_every_page_renders(flowc, tmp_path, browser):
    web = Web.of(flowc)
    browser.get(web.url_with_token)
    for page, element in [("workers.html", "local"), ("tuning.html", "nav"),
                          ("cache.html", "kinds"), ("", "jobs")]:
        browser.get(f"{web.base}/{page}")
        waiter(browser, 30).until(lambda d: d.find_element(By.ID, element))
        banner = browser.find_elements(By.ID, "error-banner")
        assert not banner or not banner[0].text.strip(), (page, banner[0].text)
        assert not script_errors(browser), page


@pytest.mark.skipif(shutil.which("dot") is None,
                    reason="Graphviz's dot is not installed (apt install graphviz)")
def test_the_model_page_draws_the_graph_and_opens_its_groups(flowc, tmp_path, browser):
    web = Web.of(flowc)
    model = save(make_models.make_encoder(np.random.default_rng(3), layers=4),
                 tmp_path / "encoder.onnx")
    flowc.submit(model)
    browser.get(web.url_with_token)
    wait = waiter(browser, 60)
    # From the jobs page's link, as a user would come.
    link = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#jobs a.model"))[0]
    link.click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph svg g.node"))
    assert browser.find_element(By.ID, "model-name").text == "encoder.onnx"
    boxes = {g.get_attribute("id") for g in
             browser.find_elements(By.CSS_SELECTOR, "#graph svg g.node")}
    # Layers 1..3 are drawn as one box of layers like layer.0.
    assert "r:encoder/layer.0" in boxes, boxes
    assert browser.find_elements(By.CSS_SELECTOR, "#kernels tbody tr")
    assert {e.get_attribute("data-kind") for e in
            browser.find_elements(By.CSS_SELECTOR, "#entries tbody tr")} >= {"artifact", "code"}

    # Opening the run draws each layer; opening a group draws what is in it.
    before = int(browser.find_element(By.ID, "graph").get_attribute("data-drawn"))
    # A drawing starts at its natural size; "fit" shows all of it.
    browser.find_element(By.ID, "fit").click()
    browser.find_element(By.CSS_SELECTOR, '#graph g.node[id="r:encoder/layer.0"]').click()
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, '#graph g[id^="r:"]'))
    for layer in range(4):
        assert browser.find_elements(
            By.CSS_SELECTOR, f'#graph g[id="g:encoder/layer.{layer}"], '
            f'#graph g[id="c:encoder/layer.{layer}"]'), layer
    browser.find_element(By.ID, "fit").click()
    group = browser.find_elements(By.CSS_SELECTOR, '#graph g.node[id^="g:"]')[-1]
    group_id = group.get_attribute("id")
    drawn = int(browser.find_element(By.ID, "graph").get_attribute("data-drawn"))
    assert drawn > before
    group.click()
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, f'#graph g.node[id="{group_id}"]'))
    assert browser.find_elements(By.CSS_SELECTOR, f'#graph g[id="c:{group_id[2:]}"]')
    digest = web.json("/api/jobs")["jobs"][-1]["model_digest"]
    view = web.json(f"/api/models/{digest}")
    # A node's details: its op, shapes and the library call it became.
    browser.find_element(By.ID, "fit").click()
    drawn = [browser.find_elements(By.CSS_SELECTOR, f'#graph g.node[id="n{i}"]')
             for i, n in enumerate(view["nodes"]) if n["op"] == "Softmax"]
    softmax = next(found[0] for found in drawn if found)
    assert "Softmax" in softmax.get_attribute("textContent")
    softmax.click()
    panel = wait.until(lambda d: d.find_element(By.ID, "node") if
                       d.find_element(By.ID, "node").is_displayed() else None)
    assert "Softmax" in panel.text and "softmax" in panel.find_element(By.ID, "node-kernels").text
    assert "1×4×16×16" in panel.text
    # The open groups survive a reload (kept in the URL).
    browser.refresh()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph svg g.node"))
    assert browser.find_elements(By.CSS_SELECTOR, f'#graph g[id="c:{group_id[2:]}"]')
    assert not script_errors(browser)
