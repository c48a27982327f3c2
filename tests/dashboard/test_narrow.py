"""The layout at 390 px wide (a phone): no page scrolls sideways; a wide table scrolls inside
itself. A real broker process with a topic and a message, headless Chromium."""
from __future__ import annotations

from selenium.webdriver.common.by import By

from mqcore.client import Message, Producer
from tests.dashboard.browser import start_browser
from tests.support.processes import BrokerProcess
from tests.support.waiting import free_port

PAGES = ("/", "/topics", "/topics/Narrow", "/groups", "/clients", "/messages",
         "/messages?topic=Narrow&begin=0&end=4000000000000")


def test_no_page_overflows_at_390_px(tmp_path):
    port = free_port()
    with BrokerProcess(tmp_path / "store", conf={"dashboardPort": port}) as b:
        with Producer("narrow-producer", namesrv_addr=b.namesrv_addr) as p:
            p.send(Message("Narrow", b'{"a long body": "' + b"x" * 300 + b'"}', keys=["k" * 60]))
        driver = start_browser()
        try:
            driver.set_window_size(390, 844)
            inner = driver.execute_script("return window.innerWidth")
            wide = {}
            for path in PAGES:
                driver.get(f"http://127.0.0.1:{port}{path}")
                assert driver.find_element(By.TAG_NAME, "h1").text
                sw = driver.execute_script("return document.documentElement.scrollWidth")
                if sw > inner:
                    wide[path] = sw
            # the message's own page (its body, hex dump and properties), through the search's link
            driver.get(f"http://127.0.0.1:{port}{PAGES[-1]}")
            driver.find_element(By.CSS_SELECTOR, "#results a").click()
            assert "Message" in driver.find_element(By.TAG_NAME, "h1").text
            sw = driver.execute_script("return document.documentElement.scrollWidth")
            if sw > inner:
                wide["message page"] = sw
            assert inner == 390 and not wide, (inner, wide)
        finally:
            driver.quit()
