"""A headless Chromium (Debian's chromium and chromedriver, scripts/setup.d/50-chromium.sh)
driven by Selenium, for the dashboard's tests. Never Selenium Manager's own browser download:
both executables are named."""
from __future__ import annotations

import base64
import os
import shutil

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def _executable(env: str, name: str) -> str:
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise RuntimeError(f"{name} is not installed: scripts/test installs it (scripts/setup.d/50-chromium.sh), "
                           f"or apt-get install chromium chromium-driver")
    return path


def start_browser() -> webdriver.Chrome:
    opts = webdriver.ChromeOptions()
    opts.binary_location = _executable("MQCORE_CHROMIUM", "chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1360,900", "--disable-extensions", "--no-first-run", "--password-store=basic"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=_executable("MQCORE_CHROMEDRIVER", "chromedriver")),
                              options=opts)
    driver.set_page_load_timeout(30)
    return driver


def send_basic_auth(driver: webdriver.Chrome, user: str | None, password: str = "") -> None:
    """Every request of this browser carries these credentials (none: stop sending them)."""
    driver.execute_cdp_cmd("Network.enable", {})
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": headers})


def text_of(driver: webdriver.Chrome, css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, css).text


def screenshot(driver: webdriver.Chrome, path: str, width: int = 1024) -> int:
    """The whole page at ``width`` px wide, not only the window's height. Returns how wide the
    page is there (``documentElement.scrollWidth``): more than ``width`` scrolls sideways."""
    driver.set_window_size(width, 900)  # the height a page needs depends on its width
    height = driver.execute_script("return Math.max(document.body.scrollHeight, 600)")
    driver.set_window_size(width, min(int(height) + 140, 4000))
    try:
        # measured two frames on: the page's resize handlers (the charts') have run by then
        page_width = int(driver.execute_async_script(
            "var done = arguments[arguments.length - 1]; requestAnimationFrame(function () {"
            " requestAnimationFrame(function () { done(document.documentElement.scrollWidth); }); });"))
        driver.save_screenshot(path)
    finally:
        driver.set_window_size(1360, 900)
    return page_width


#: a laptop's window and a phone's: docs/dashboard.md shows ``name.png`` (1024 px) and ``name-390.png``
SHOT_WIDTHS = (1024, 390)


def shoot(driver: webdriver.Chrome, shots: str, name: str) -> None:
    """The current page at both widths, into ``shots``: each must be a real, rendered PNG of
    that width and the page must not scroll sideways at either."""
    for width in SHOT_WIDTHS:
        path = os.path.join(shots, f"{name}.png" if width == SHOT_WIDTHS[0] else f"{name}-{width}.png")
        page_width = screenshot(driver, path, width)
        assert page_width <= width, f"{name} scrolls sideways at {width} px: {page_width} px wide"
        with open(path, "rb") as f:
            head = f.read(24)
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(head[16:20], "big") == width  # the PNG's own width
        assert os.path.getsize(path) > 10_000  # a rendered page, not a blank one
