"""Auto-refresh: with the header's box ticked, a page's tables follow the broker without a reload
(a topic a client creates after the page loaded appears in the open Topics table) and a typed
form field is left alone. A real broker process and headless Chromium."""
from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from mqcore.client import Message, Producer
from tests.dashboard.browser import start_browser
from tests.support.processes import BrokerProcess
from tests.support.waiting import free_port


def test_the_topics_table_follows_the_broker_without_a_reload(tmp_path):
    port = free_port()
    with BrokerProcess(tmp_path / "store", conf={"dashboardPort": port}) as b:
        driver = start_browser()
        try:
            driver.get(f"http://127.0.0.1:{port}/topics")
            assert "FreshTopic" not in driver.find_element(By.ID, "topics").text
            driver.find_element(By.ID, "autorefresh").click()
            driver.execute_script("window.loadedMarker = 1")  # gone if the page reloads
            with Producer("refresh-producer", namesrv_addr=b.namesrv_addr) as p:
                p.send(Message("FreshTopic", b"x"))
            WebDriverWait(driver, 20).until(lambda d: "FreshTopic" in d.find_element(By.ID, "topics").text)
            assert driver.execute_script("return window.loadedMarker") == 1
            # the box is kept across pages; a field being typed in survives a refresh
            driver.get(f"http://127.0.0.1:{port}/messages")
            assert driver.find_element(By.ID, "autorefresh").is_selected()
            field = driver.find_element(By.NAME, "topic")
            field.send_keys("half-typed")
            WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.body.dataset.refreshed"))
            assert field.get_attribute("value") == "half-typed"
        finally:
            driver.quit()
