"""The live page (``GET /``) in headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by selenium) against a real server on loopback.

The page lists and draws the subscriptions and the newest window messages (its canvas carries
their counts, checked against ``GET /v1/messages``); choosing one shows its top-k, folded from its event
stream, each entry with its message's text and place (a click marks it on the map); publishing changes the top-k and the page follows until it equals the server's result
(ids and scores, in order).  With a token file the page shows the refusal, then works once the
token is typed in.  A screenshot of each run is kept: under ``$SKYPE_ARTIFACTS`` when set, else
in pytest's temporary directory; its path is printed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from skype import io
from skype.client import Client
from skype.data.workloads import make_workload
from tests.service_process import ServerProcess

WAIT_S = 60  # an upper bound for the page to catch up, not a timing claim


@pytest.fixture(scope="module")
def workload():
    w = make_workload("tweets", num_subs=25, num_messages=1500, seed=5)
    return list(io.subscription_objects(w.subscriptions, w.vocabulary)), list(io.message_objects(w.messages, w.vocabulary))


@pytest.fixture
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.fail("the browser test needs Debian's chromium and chromium-driver (apt-get install -y chromium "
                    "chromium-driver); .ci/run installs them")
    opts = Options()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,900", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def artifact(tmp_path: Path, name: str) -> Path:
    root = Path(os.environ.get("SKYPE_ARTIFACTS") or tmp_path)
    root.mkdir(parents=True, exist_ok=True)
    return root / name


def page_topk(driver) -> list[list]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#topk li')].map(li => [Number(li.dataset.id), Number(li.dataset.value)])")


def server_topk(client: Client, sid: int) -> list[list]:
    return [[e["id"], e["score"]] for e in client.result(sid)["result"]["topk"]]


def wait_equal(driver, client: Client, sid: int) -> None:
    def caught_up(d) -> bool:
        return page_topk(d) == server_topk(client, sid)

    try:
        WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(caught_up)
    except Exception:
        raise AssertionError(f"page top-k {page_topk(driver)} != server {server_topk(client, sid)}; "
                             f"page error: {driver.find_element(By.ID, 'error').text!r}") from None


def canvas_colours(driver) -> int:
    """Distinct colours on the map canvas (sampled): a drawn map has sea, land, grid and dots."""
    return driver.execute_script("""
        const c = document.getElementById('map'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        for (let i = 0; i < d.length; i += 4 * 7) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
        return seen.size;""")


def recent_ids(client: Client) -> list[int]:
    headers = {"Authorization": f"Bearer {client.token}"} if client.token else {}
    resp = httpx.get(client.url + "/v1/messages", params={"last": 200}, headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    return [json.loads(line)["id"] for line in resp.text.splitlines()]


def message_pixels(driver) -> int:
    """Canvas pixels of the message dots' colour (#d03060, give or take antialiasing)."""
    return driver.execute_script("""
        const c = document.getElementById('map'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4)
          if (Math.abs(d[i] - 208) < 24 && Math.abs(d[i + 1] - 48) < 24 && Math.abs(d[i + 2] - 96) < 24) n++;
        return n;""")


def wait_messages(driver, client: Client, sid: int) -> None:
    """The page draws the server's newest 200 window messages and rings the chosen top-k's among them."""
    def caught_up(d) -> bool:
        ids = recent_ids(client)
        in_topk = {e[0] for e in server_topk(client, sid)} & set(ids)
        canvas = d.find_element(By.ID, "map")
        return (d.execute_script("return window.skypePage.messages.map(m => m.id)") == ids
                and canvas.get_attribute("data-messages") == str(len(ids))
                and canvas.get_attribute("data-highlighted") == str(len(in_topk)))

    try:
        WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(caught_up)
    except Exception:
        canvas = driver.find_element(By.ID, "map")
        raise AssertionError(f"page draws {canvas.get_attribute('data-messages')} messages, "
                             f"{canvas.get_attribute('data-highlighted')} ringed; server: {len(recent_ids(client))}; "
                             f"page error: {driver.find_element(By.ID, 'msg-count').text!r}") from None


def marked_pixels(driver) -> int:
    """Canvas pixels of the mark's colour (#6a1b9a)."""
    return driver.execute_script("""
        const c = document.getElementById('map'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4)
          if (Math.abs(d[i] - 106) < 24 && Math.abs(d[i + 1] - 27) < 24 && Math.abs(d[i + 2] - 154) < 24) n++;
        return n;""")


def check_entries_say_what_they_are(driver, client: Client, sid: int) -> None:
    """Each top-k entry shows its message's text (here: its terms) and place, as the server has
    them; a click on an entry marks that message on the map, a second click unmarks it."""
    ids = [e[0] for e in server_topk(client, sid)]
    records = {rec["id"]: rec for rec in client.messages(ids=ids)}
    assert sorted(records) == sorted(ids)  # the top-k's messages are in the window

    def described(d) -> bool:
        return all(li.get_attribute("data-place") for li in d.find_elements(By.CSS_SELECTOR, "#topk li"))

    WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(described)
    items = driver.find_elements(By.CSS_SELECTOR, "#topk li")
    assert [int(li.get_attribute("data-id")) for li in items] == ids
    for li in items:
        rec = records[int(li.get_attribute("data-id"))]
        assert [float(v) for v in li.get_attribute("data-place").split(",")] == [rec["x"], rec["y"]]
        words = set(rec["terms"]) if "terms" in rec else set(rec["text"].split())
        shown = li.get_attribute("data-text").rstrip("…").split()
        assert shown and set(shown[:-1]) <= words, (shown, words)
        assert li.get_attribute("data-text") in li.text
    assert driver.find_element(By.ID, "map").get_attribute("data-marked") is None and marked_pixels(driver) == 0
    items[-1].click()
    canvas = driver.find_element(By.ID, "map")
    WebDriverWait(driver, WAIT_S).until(lambda d: canvas.get_attribute("data-marked") == str(ids[-1]))
    assert marked_pixels(driver) > 0
    assert "marked" in driver.find_element(By.CSS_SELECTOR, f"#topk li[data-id='{ids[-1]}']").get_attribute("class")
    driver.find_element(By.CSS_SELECTOR, f"#topk li[data-id='{ids[-1]}']").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: canvas.get_attribute("data-marked") is None)
    assert marked_pixels(driver) == 0


def test_page_follows_a_subscription_live(tmp_path, browser, workload):
    subs, msgs = workload
    with ServerProcess(tmp_path / "data", "--window", "1000") as server:
        client = Client(server.url)
        for rec in subs:
            client.subscribe(rec)
        client.publish(msgs[:400], batch_size=200)

        browser.get(server.url + "/")
        WebDriverWait(browser, WAIT_S).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#subs li")) == len(subs))
        sid = max(range(len(subs)), key=lambda i: len(server_topk(client, i)))  # one with a non-empty top-k
        browser.find_element(By.CSS_SELECTOR, f"#subs li[data-id='{sid}']").click()
        wait_equal(browser, client, sid)
        before = page_topk(browser)

        client.publish(msgs[400:], batch_size=100)       # the window moves on: the top-k changes
        wait_equal(browser, client, sid)
        assert page_topk(browser) != before
        assert browser.find_element(By.ID, "stream").text == "live"
        assert browser.find_elements(By.CSS_SELECTOR, "#events li")
        assert canvas_colours(browser) > 20
        wait_messages(browser, client, sid)
        assert browser.find_element(By.ID, "map").get_attribute("data-messages") == "200"
        assert int(browser.find_element(By.ID, "map").get_attribute("data-highlighted")) > 0
        assert message_pixels(browser) > 0
        check_entries_say_what_they_are(browser, client, sid)
        shot = artifact(tmp_path, "service-page.png")
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 0
        print(f"screenshot: {shot}")


def test_page_with_a_token(tmp_path, browser, workload):
    subs, msgs = workload
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"admin": ["admin-secret"], "publisher": ["publisher-secret"]}))
    with ServerProcess(tmp_path / "data", "--window", "1000", "--token-file", str(tokens)) as server:
        client = Client(server.url, token="publisher-secret")
        for rec in subs[:5]:
            client.subscribe(rec)
        client.publish(msgs[:300], batch_size=300)

        browser.get(server.url + "/")
        WebDriverWait(browser, WAIT_S).until(lambda d: "401" in d.find_element(By.ID, "error").text)
        field = browser.find_element(By.ID, "token")
        field.send_keys("admin-secret")
        browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)
        WebDriverWait(browser, WAIT_S).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#subs li")) == 5)
        assert browser.execute_script("return localStorage.getItem('skype.token')") == "admin-secret"
        browser.find_element(By.CSS_SELECTOR, "#subs li[data-id='2']").click()
        wait_equal(browser, client, 2)
        client.publish(msgs[300:900], batch_size=300)
        wait_equal(browser, client, 2)
        wait_messages(browser, client, 2)
        shot = artifact(tmp_path, "service-page-token.png")
        assert browser.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
