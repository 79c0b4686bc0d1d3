"""ykshm's own web UI at the banner's URL, in a real browser: Debian's headless chromium driven by
Selenium (/usr/bin/chromium and /usr/bin/chromedriver named explicitly, SE_OFFLINE: nothing is
downloaded), against `ykshm run` with its demo. Each view shows the demo's objects, the event feed
shows a pod created with kubectl, and after the web restarts the feed resumes without repeating
an event. Screenshots go to the test's tmp_path."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

POD = {"apiVersion": "v1", "kind": "Pod",
       "spec": {"schedulerName": "yunikorn", "containers": [
           {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


@pytest.fixture
def browser(monkeypatch):
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--window-size=1280,900", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
    yield driver
    driver.quit()


XSS = "<img src=x onerror=\"document.title='owned'\">"
"""A user name as an attacker would choose it: the page must show it as text, never run it."""


def kubectl_create(inst, tmp_path, name: str, app: str, user: str = "") -> None:
    meta = {"name": name, "labels": {"applicationId": app}}
    if user:   # the admin may set user.info (the run trusts system:masters, as the demo does)
        meta["annotations"] = {"yunikorn.apache.org/user.info": json.dumps({"user": user, "groups": []})}
    body = dict(POD, metadata=meta)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    made = subprocess.run(["kubectl", "--kubeconfig", inst.kubeconfig, *([] if user else ["--as", "alice"]),
                           "create", "-f", "-"],
                          input=json.dumps(body), env=env, capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr


def show(driver, tmp_path, view: str, *texts: str, timeout: float = 30) -> str:
    """Open a view, wait until its content names every text, save its screenshot."""
    driver.get(driver.current_url.split("#")[0] + "#" + view)

    def ready(d):
        main = d.find_element(By.ID, "view")
        text = main.text
        return main.get_attribute("data-view") == view and all(t in text for t in texts) and text
    text = WebDriverWait(driver, timeout, poll_frequency=0.2,
                         ignored_exceptions=[StaleElementReferenceException]).until(ready)
    driver.save_screenshot(str(tmp_path / f"{view}.png"))
    return text


def event_ids(driver) -> list[int]:
    """The ids the event table shows, read in one go (the view re-renders as events arrive)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#view table tr td:first-child')].map(c => Number(c.textContent))")


def test_every_view_shows_the_demo_and_live_events_resume(make_run, browser, tmp_path):
    inst = make_run(extra=("--demo",))
    page = inst.web.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert inst.web.get("/", headers={"If-None-Match": page.headers["etag"]}).status_code == 304
    missing = inst.web.get("/ui/nothing.js")
    assert missing.status_code == 404 and missing.json()["status_code"] == 404

    browser.get(inst.url + "/")
    show(browser, tmp_path, "queues", "root.prod", "root.default", "default")
    show(browser, tmp_path, "apps", "demo-", "Running", "node-")
    show(browser, tmp_path, "nodes", "node-0000", "node-0003")
    kubectl_create(inst, tmp_path, "ui-xss", "ui-xss-app", user=XSS)
    show(browser, tmp_path, "usage", "Usage per user", "root.", XSS)   # shown as text
    assert browser.title == "ykshm" and not browser.find_elements(By.CSS_SELECTOR, "#view img")
    streams = show(browser, tmp_path, "streams", "Streams job default/demo", "demo-0-1", "demo-2-1")
    assert "consistent-region-operator" not in streams      # the region operator runs no PE
    kubectl_create(inst, tmp_path, "ui-live", "ui-live-app")
    show(browser, tmp_path, "events", "ui-live-app")
    assert browser.find_element(By.ID, "feed-state").text == "events: live"

    web = inst.roles()["web"]
    os.kill(web, 9)                      # the stream breaks; the page reconnects to the new web
    inst.wait_role_pid("web", web)
    kubectl_create(inst, tmp_path, "ui-after", "ui-after-app")
    show(browser, tmp_path, "events", "ui-live-app", "ui-after-app")
    ids = event_ids(browser)
    assert len(ids) == len(set(ids)), "an event shown twice after the reconnect"
    assert ids == list(range(ids[0], ids[0] - len(ids), -1)), "events lost or out of order across the reconnect"
