"""The chat page at / in headless Chromium (Debian's chromium and
chromium-driver, driven by selenium) against the real server.

Replies are checked against the same request made with the official openai
client: the mock backend gives the same text for the same request, so a
page that sent the history, system prompt, temperature, max tokens and
model it shows gets exactly that text back. Screenshots of the main states
go to target/ui-screenshots (or $RKLLM_UI_SCREENSHOTS); scripts/test names
the folder at the end of its output.
"""

import os
import pathlib
import re
import shutil
import tempfile
import time
import urllib.request

import openai
import pytest

from conftest import ROOT, start_server, stop_server
from test_vision import RED, colours, vision_server  # noqa: F401 (a fixture)

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
SHOTS = pathlib.Path(os.environ.get("RKLLM_UI_SCREENSHOTS", ROOT / "target" / "ui-screenshots"))

if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip(
        f"chat page tests skipped: Chromium ({CHROMIUM}) or ChromeDriver ({CHROMEDRIVER}) is not installed; "
        "scripts/test installs Debian's chromium and chromium-driver with apt-get where it can",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

WIDE = (1280, 860)
PHONE = (390, 844)


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="rkllm-ui-")
    for flag in [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", f"--window-size={WIDE[0]},{WIDE[1]}",
    ]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Three mock models at 40 tokens/s; qwen3-mock thinks (the `thinking`
    capability, from its name)."""
    config = tmp_path_factory.mktemp("ui") / "config.toml"
    config.write_text(
        '[[models]]\nname = "qwen-mock"\n[[models]]\nname = "llama-mock"\n[[models]]\nname = "qwen3-mock"\n'
    )
    proc, base = start_server("--config", str(config), "--mock-tokens-per-second", "40")
    yield base
    stop_server(proc)


# ---- helpers -----------------------------------------------------------------

def wait(driver, condition, timeout=20, what="the page"):
    return WebDriverWait(driver, timeout, poll_frequency=0.02).until(
        lambda d: condition(d), message=f"timed out waiting for {what}"
    )


def shot(driver, name):
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def open_page(driver, base):
    driver.get(base + "/")
    wait(driver, lambda d: d.find_element(By.ID, "model").is_enabled(), what="the model list")
    wait(driver, lambda d: d.find_element(By.ID, "status").text.startswith("ready"), what="the status line")


def set_value(driver, element_id, value):
    """Sets an input as a person would (the page listens for `input`)."""
    driver.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('input', {bubbles: true}));",
        element_id, value,
    )


def type_message(driver, text, send=True):
    """Types `text` into the message box, Shift+Enter between lines, Enter
    at the end."""
    box = driver.find_element(By.ID, "prompt")
    for n, line in enumerate(text.split("\n")):
        if n:
            box.send_keys(Keys.SHIFT, Keys.ENTER)
        box.send_keys(line)
    if send:
        box.send_keys(Keys.ENTER)


def replies(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#messages .message.assistant")


def wait_reply(driver, count):
    """Waits for reply `count` (1-based) to end; returns it."""
    wait(driver, lambda d: len(replies(d)) >= count and replies(d)[count - 1].get_attribute("data-finish"),
         what=f"reply {count} to end")
    return replies(driver)[count - 1]


def text_of(element):
    return " ".join(element.find_element(By.CSS_SELECTOR, ".body").text.split())


def api_completion(base, messages, model, temperature, max_tokens, key="none", **extra):
    client = openai.OpenAI(base_url=base + "/v1", api_key=key)
    return client.chat.completions.create(
        model=model, messages=messages, temperature=temperature, max_tokens=max_tokens, **extra
    )


def api_reply(base, messages, model, temperature, max_tokens, key="none", **extra):
    return api_completion(base, messages, model, temperature, max_tokens, key, **extra).choices[0].message.content


def words(text):
    return " ".join(text.split())


# Keeps the body of every chat request the page sends, in window.sent.
RECORD_REQUESTS = """
window.sent = [];
const fetchFirst = window.fetch;
window.fetch = (path, init) => {
  if (path === '/v1/chat/completions') window.sent.push(JSON.parse(init.body));
  return fetchFirst(path, init);
};
"""

# Notes the state of the last reply after every change to the conversation,
# in window.phases: whether it has a thinking section, whether that is open,
# and how much thinking and answer it shows.
WATCH_REPLY = """
window.phases = [];
new MutationObserver(() => {
  const reply = [...document.querySelectorAll('#messages .message.assistant')].at(-1);
  if (!reply) return;
  const section = reply.querySelector('details.thinking');
  const body = reply.querySelector('.body');
  window.phases.push({
    section: section !== null,
    open: section?.open ?? false,
    thinking: section?.querySelector('.text').textContent.length ?? 0,
    answer: body.textContent.length,
    answerShown: body.checkVisibility(),
  });
}).observe(document.getElementById('messages'),
           {childList: true, subtree: true, characterData: true, attributes: true});
"""


def metric(base, name, labels="", key=None):
    request = urllib.request.Request(base + "/metrics")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    text = urllib.request.urlopen(request).read().decode()
    series = f"{name}{{{labels}}}" if labels else name
    values = [float(line.split()[-1]) for line in text.splitlines() if line.split(" ")[0] == series]
    return sum(values)


# ---- tests ---------------------------------------------------------------------

def test_the_page_loads_without_console_errors_and_lists_the_models(browser, server):
    open_page(browser, server)
    options = [o.text for o in Select(browser.find_element(By.ID, "model")).options]
    assert options == ["qwen-mock · available", "llama-mock · available", "qwen3-mock · available · thinking"]
    assert browser.find_element(By.ID, "status").text == "ready · queue 0 · streams 0 · loaded: none"
    # Every control has a name a screen reader can say.
    unnamed = browser.execute_script(
        "return [...document.querySelectorAll('input, select, textarea, button')]"
        ".filter(e => !(e.labels?.length || e.getAttribute('aria-label') || e.textContent.trim()))"
        ".map(e => e.id)"
    )
    assert unnamed == []
    # No inline script anywhere (the policy forbids it, and none is needed).
    assert browser.execute_script("return document.querySelectorAll('script:not([src])').length") == 0
    shot(browser, "01-empty")
    assert console_errors(browser) == []


def test_a_reply_streams_in_piece_by_piece_and_is_what_the_api_gives(browser, server):
    open_page(browser, server)
    set_value(browser, "system", "Be brief.")
    set_value(browser, "temperature", "0.5")
    set_value(browser, "max-tokens", "40")
    type_message(browser, "Tell me about boards. @mock(length=30)")
    # Watch the reply grow until it ends.
    lengths = []
    while True:
        found = replies(browser)
        if found:
            lengths.append(len(found[0].find_element(By.CSS_SELECTOR, ".body").text))
            if found[0].get_attribute("data-finish"):
                break
        time.sleep(0.02)
    growing = sorted(set(n for n in lengths[:-1] if n > 0))
    assert len(growing) >= 3, f"the reply did not grow piece by piece: {lengths}"
    assert lengths == sorted(lengths)
    reply = replies(browser)[0]
    assert reply.get_attribute("data-finish") == "stop"
    expected = api_reply(
        server, [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Tell me about boards. @mock(length=30)"}],
        "qwen-mock", 0.5, 40,
    )
    assert text_of(reply) == " ".join(expected.split())
    meta = reply.find_element(By.CSS_SELECTOR, ".meta").text
    assert re.fullmatch(r"qwen-mock · 30 tokens · [\d.]+ tokens/s · first token \d+ ms", meta), meta
    # The model list shows that the model is loaded now.
    wait(browser, lambda d: Select(d.find_element(By.ID, "model")).options[0].text == "qwen-mock · loaded",
         what="the model's state to show loaded", timeout=10)
    shot(browser, "02-reply")

    # The second turn carries the first: the server gets the whole chat.
    type_message(browser, "And the second one?")
    second = wait_reply(browser, 2)
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tell me about boards. @mock(length=30)"},
        {"role": "assistant", "content": expected},
        {"role": "user", "content": "And the second one?"},
    ]
    with_history = api_reply(server, history, "qwen-mock", 0.5, 40)
    alone = api_reply(server, [history[0], history[3]], "qwen-mock", 0.5, 40)
    assert with_history != alone
    assert text_of(second) == " ".join(with_history.split())
    shot(browser, "03-second-turn")
    assert console_errors(browser) == []


def test_switching_models(browser, server):
    open_page(browser, server)
    Select(browser.find_element(By.ID, "model")).select_by_value("llama-mock")
    type_message(browser, "Who are you?")
    reply = wait_reply(browser, 1)
    assert reply.find_element(By.CSS_SELECTOR, ".meta").text.startswith("llama-mock · ")
    messages = [{"role": "user", "content": "Who are you?"}]
    on_llama = api_reply(server, messages, "llama-mock", 0.8, 512)
    assert on_llama != api_reply(server, messages, "qwen-mock", 0.8, 512)
    assert text_of(reply) == " ".join(on_llama.split())
    assert console_errors(browser) == []


def test_stop_ends_the_generation_on_the_server(browser, server):
    open_page(browser, server)
    aborts = metric(server, "rkllm_aborts_total", 'cause="disconnect"')
    type_message(browser, "Go on for a long time. @mock(length=5000)")
    wait(browser, lambda d: replies(d) and len(replies(d)[0].find_element(By.CSS_SELECTOR, ".body").text) > 20,
         what="some text")
    stop = browser.find_element(By.ID, "stop")
    assert stop.is_displayed() and not browser.find_element(By.ID, "send").is_displayed()
    shot(browser, "04-streaming")
    stop.click()
    reply = wait_reply(browser, 1)
    assert reply.get_attribute("data-finish") == "stopped"
    assert reply.find_element(By.CSS_SELECTOR, ".meta").text.endswith(" · stopped")
    assert browser.find_element(By.ID, "send").is_displayed()
    # The server saw the client go and ended the generation.
    deadline = time.monotonic() + 10
    while metric(server, "rkllm_aborts_total", 'cause="disconnect"') <= aborts:
        assert time.monotonic() < deadline, "no abort counted"
        time.sleep(0.05)
    while metric(server, "rkllm_active_streams") != 0:
        assert time.monotonic() < deadline, "the stream is still active"
        time.sleep(0.05)
    shot(browser, "05-stopped")
    assert console_errors(browser) == []


def test_new_chat_while_a_reply_streams_starts_an_empty_chat(browser, server):
    open_page(browser, server)
    type_message(browser, "Go on for a long time. @mock(length=5000)")
    wait(browser, lambda d: replies(d) and len(replies(d)[0].find_element(By.CSS_SELECTOR, ".body").text) > 20,
         what="some text")
    browser.find_element(By.ID, "new-chat").click()
    wait(browser, lambda d: d.find_element(By.ID, "send").is_displayed(), what="the stream to end")
    assert replies(browser) == []
    # The cut reply ended after the chat was emptied: it is not in the new one.
    browser.execute_script(RECORD_REQUESTS)
    question = "After a new chat. @mock(length=12)"
    type_message(browser, question)
    reply = wait_reply(browser, 1)
    assert browser.execute_script("return window.sent")[0]["messages"] == [{"role": "user", "content": question}]
    assert text_of(reply) == words(api_reply(server, [{"role": "user", "content": question}], "qwen-mock", 0.8, 512))
    assert console_errors(browser) == []


def test_html_in_a_reply_is_shown_as_text_and_markdown_is_rendered(browser, server):
    open_page(browser, server)
    said = ("Look: <script>window.pwned = 1</script> <img src=x onerror=\"window.pwned = 2\"> "
            "<b>not bold</b> and **bold** and `inline`\n```python\nprint('<tag>')\n```")
    type_message(browser, "@mock(echo=1) " + said)
    reply = wait_reply(browser, 1)
    body = reply.find_element(By.CSS_SELECTOR, ".body")
    assert "<script>window.pwned = 1</script>" in body.text
    assert '<img src=x onerror="window.pwned = 2">' in body.text
    assert "<b>not bold</b>" in body.text
    assert browser.execute_script("return window.pwned") is None
    for tag in ["script", "img", "b"]:
        assert body.find_elements(By.TAG_NAME, tag) == [], tag
    assert [e.text for e in body.find_elements(By.TAG_NAME, "strong")] == ["bold"]
    assert [e.text for e in body.find_elements(By.CSS_SELECTOR, "p code")] == ["inline"]
    code = body.find_element(By.CSS_SELECTOR, ".code pre code")
    assert code.text == "print('<tag>')"
    assert body.find_element(By.CSS_SELECTOR, ".code-bar span").text == "python"
    copy = body.find_element(By.CSS_SELECTOR, ".code-bar button")
    copy.click()
    wait(browser, lambda d: copy.text == "Copied", what="the copy button to report")
    shot(browser, "06-markdown")
    assert console_errors(browser) == []


def test_dark_mode_follows_the_system(browser, server):
    open_page(browser, server)
    background = "return getComputedStyle(document.body).backgroundColor"
    light = browser.execute_script(background)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        dark = browser.execute_script(background)
        type_message(browser, "Hello in the dark. @mock(length=12)")
        wait_reply(browser, 1)
        shot(browser, "07-dark")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    brightness = lambda css: sum(int(v) for v in re.findall(r"\d+", css)[:3])  # noqa: E731
    assert brightness(light) > 600 and brightness(dark) < 150, (light, dark)


def test_a_phone_sized_window(browser, server):
    browser.set_window_size(*PHONE)
    try:
        open_page(browser, server)
        fits = "return document.documentElement.scrollWidth <= window.innerWidth"
        assert browser.execute_script(fits)
        settings = browser.find_element(By.ID, "settings")
        toggle = browser.find_element(By.ID, "settings-toggle")
        assert toggle.is_displayed() and not settings.is_displayed()
        toggle.click()
        assert settings.is_displayed() and toggle.get_attribute("aria-expanded") == "true"
        shot(browser, "08-phone-settings")
        toggle.click()
        assert not settings.is_displayed()
        type_message(browser, "Hi from a phone. @mock(length=25)")
        reply = wait_reply(browser, 1)
        assert reply.get_attribute("data-finish") == "stop"
        assert browser.execute_script(fits)
        composer = browser.find_element(By.ID, "composer")
        assert composer.is_displayed() and composer.rect["x"] >= 0
        assert composer.rect["x"] + composer.rect["width"] <= PHONE[0]
        shot(browser, "09-phone")
        assert console_errors(browser) == []
    finally:
        browser.set_window_size(*WIDE)


def test_with_an_api_key_the_page_asks_for_it_and_keeps_it_for_the_session(browser):
    proc, base = start_server("--mock-tokens-per-second", "40", "--api-key", "sesame")
    try:
        browser.get(base + "/")
        dialog = browser.find_element(By.ID, "key-dialog")
        wait(browser, lambda d: dialog.get_attribute("open") is not None, what="the key dialog")
        shot(browser, "10-api-key")
        key = browser.find_element(By.ID, "key")
        key.send_keys("wrong", Keys.ENTER)
        wait(browser, lambda d: "refused" in d.find_element(By.ID, "key-error").text, what="the refusal")
        assert dialog.get_attribute("open") is not None
        key.send_keys("sesame", Keys.ENTER)
        wait(browser, lambda d: dialog.get_attribute("open") is None, what="the dialog to close")
        wait(browser, lambda d: d.find_element(By.ID, "model").is_enabled(), what="the model list")
        type_message(browser, "With a key. @mock(length=10)")
        reply = wait_reply(browser, 1)
        assert reply.get_attribute("data-finish") == "stop"
        model = Select(browser.find_element(By.ID, "model")).first_selected_option.get_attribute("value")
        messages = [{"role": "user", "content": "With a key. @mock(length=10)"}]
        assert text_of(reply) == " ".join(api_reply(base, messages, model, 0.8, 512, key="sesame").split())
        # Kept for this tab's session only.
        assert browser.execute_script("return sessionStorage.getItem('rkllm-server.api-key')") == "sesame"
        assert browser.execute_script("return localStorage.length") == 0
        browser.refresh()
        open_page(browser, base)
        assert browser.find_element(By.ID, "key-dialog").get_attribute("open") is None
        # The only errors are the refused requests themselves.
        errors = console_errors(browser)
        assert all("401" in e["message"] for e in errors), errors
    finally:
        stop_server(proc)


def test_a_picture_for_a_vision_model(browser, vision_server, tmp_path):  # noqa: F811
    open_page(browser, vision_server)
    attach = browser.find_element(By.ID, "attach")
    Select(browser.find_element(By.ID, "model")).select_by_value("text")
    assert not attach.is_displayed()
    Select(browser.find_element(By.ID, "model")).select_by_value("vl")
    assert attach.is_displayed()
    picture = tmp_path / "red.png"
    picture.write_bytes(RED)
    browser.find_element(By.ID, "image").send_keys(str(picture))
    wait(browser, lambda d: d.find_element(By.ID, "attachment").is_displayed(), what="the preview")
    assert browser.find_element(By.ID, "attachment-name").text == "red.png"
    type_message(browser, "What is in this picture?")
    reply = wait_reply(browser, 1)
    # The fake runtime reports the mean colour of what the encoder saw:
    # red, padded with grey to a square.
    assert colours(reply.find_element(By.CSS_SELECTOR, ".body").text) == ["223,32,32"]
    user = browser.find_elements(By.CSS_SELECTOR, "#messages .message.user")[0]
    assert user.find_element(By.TAG_NAME, "img").get_attribute("src").startswith("data:image/png;base64,")
    assert not browser.find_element(By.ID, "attachment").is_displayed()
    shot(browser, "11-vision")
    assert console_errors(browser) == []


def test_a_thinking_reply_shows_its_thinking_folded_above_the_answer(browser, server):
    open_page(browser, server)
    switch = browser.find_element(By.ID, "think")
    assert not switch.is_displayed()
    Select(browser.find_element(By.ID, "model")).select_by_value("qwen3-mock")
    assert switch.is_displayed() and switch.is_selected()
    browser.execute_script(RECORD_REQUESTS + WATCH_REPLY)
    question = "Why is the sky blue? @mock(think=1)"
    type_message(browser, question)
    reply = wait_reply(browser, 1)
    assert reply.get_attribute("data-finish") == "stop"
    assert browser.execute_script("return window.sent")[0]["reasoning_effort"] == "medium"
    expected = api_completion(server, [{"role": "user", "content": question}], "qwen3-mock", 0.8, 512,
                              reasoning_effort="medium")
    thought = expected.choices[0].message.model_extra["reasoning_content"]
    answer = expected.choices[0].message.content
    assert thought and answer

    # Folded above the answer once the answer has come, its text rendered.
    section = reply.find_element(By.CSS_SELECTOR, "details.thinking")
    body = reply.find_element(By.CSS_SELECTOR, ".body")
    assert browser.execute_script(
        "return arguments[0].nextElementSibling === arguments[1]", section, body)
    assert section.get_attribute("open") is None
    summary = section.find_element(By.TAG_NAME, "summary")
    assert re.fullmatch(r"Thought for \d+\.\d s", summary.text), summary.text
    text = section.find_element(By.CSS_SELECTOR, ".text")
    assert not text.is_displayed()
    assert words(text.get_attribute("textContent")) == words(thought)
    # The answer alone, without the tags or the thinking.
    assert text_of(reply) == words(answer)
    assert "think>" not in reply.get_attribute("textContent")

    # While the model thought the section was open and the answer hidden;
    # it folded when the answer started.
    phases = browser.execute_script("return window.phases")
    thinking = [p for p in phases if p["thinking"] and not p["answer"]]
    assert thinking and all(p["open"] and not p["answerShown"] for p in thinking), phases
    answering = [p for p in phases if p["answer"]]
    assert answering and all(p["section"] and not p["open"] and p["answerShown"] for p in answering), phases
    assert phases.index(thinking[0]) < phases.index(answering[0])

    # The token count and rate include the thinking.
    meta = reply.find_element(By.CSS_SELECTOR, ".meta").text
    found = re.fullmatch(r"qwen3-mock · (\d+) tokens \((\d+) thinking\) · [\d.]+ tokens/s · first token \d+ ms", meta)
    assert found, meta
    usage = expected.usage
    assert int(found[1]) == usage.completion_tokens > usage.completion_tokens_details.reasoning_tokens
    assert int(found[2]) == usage.completion_tokens_details.reasoning_tokens
    shot(browser, "12-thinking")

    summary.click()
    assert section.get_attribute("open") is not None and text.is_displayed()

    # The next turn sends the answer without its thinking; each reply keeps
    # its own thinking.
    second_question = "And at sunset? @mock(think=1)"
    type_message(browser, second_question)
    second = wait_reply(browser, 2)
    history = [{"role": "user", "content": question}, {"role": "assistant", "content": answer},
               {"role": "user", "content": second_question}]
    assert browser.execute_script("return window.sent")[1]["messages"] == history
    expected = api_completion(server, history, "qwen3-mock", 0.8, 512, reasoning_effort="medium").choices[0].message
    assert text_of(second) == words(expected.content)
    second_text = second.find_element(By.CSS_SELECTOR, "details.thinking .text")
    assert words(second_text.get_attribute("textContent")) == words(expected.model_extra["reasoning_content"])
    assert words(text.get_attribute("textContent")) == words(thought)
    assert section.get_attribute("open") is not None
    shot(browser, "13-thinking-open")
    assert console_errors(browser) == []


def test_with_the_think_switch_off_no_thinking_is_shown(browser, server):
    open_page(browser, server)
    Select(browser.find_element(By.ID, "model")).select_by_value("qwen3-mock")
    browser.execute_script(RECORD_REQUESTS)
    switch = browser.find_element(By.ID, "think")
    switch.click()
    assert not switch.is_selected()
    question = "Quick, no thinking. @mock(think=1)"
    type_message(browser, question)
    reply = wait_reply(browser, 1)
    assert browser.execute_script("return window.sent")[0]["reasoning_effort"] == "none"
    assert reply.find_elements(By.CSS_SELECTOR, "details.thinking") == []
    assert text_of(reply) == words(api_reply(server, [{"role": "user", "content": question}], "qwen3-mock",
                                             0.8, 512, reasoning_effort="none"))
    assert "thinking" not in reply.find_element(By.CSS_SELECTOR, ".meta").text
    shot(browser, "14-thinking-off")

    # A model that does not think gets no switch and no reasoning_effort.
    Select(browser.find_element(By.ID, "model")).select_by_value("qwen-mock")
    assert not switch.is_displayed()
    type_message(browser, "Plain model. @mock(think=1)")
    reply = wait_reply(browser, 2)
    assert "reasoning_effort" not in browser.execute_script("return window.sent")[1]
    assert reply.find_elements(By.CSS_SELECTOR, "details.thinking") == []
    assert console_errors(browser) == []
