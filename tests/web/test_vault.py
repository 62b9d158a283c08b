"""The Vault view (``js/vault.js`` with ``js/vaultcrypto.js``) in a real
browser: entries are encrypted and decrypted in the page with WebCrypto
(format v2); what the page stores opens with the Python client and the other
way round; the passphrase and the plain secret are never stored by the page
nor sent to the node."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import trio
from playwright.sync_api import expect

from quart_mesh.vault_client import decrypt, encrypt
from tests.browser import Person, call, chromium, in_browser, shot
from tests.test_vault_client import LABEL, PASSPHRASE, SECRET, V2_VECTOR
from tests.web.conftest import Served
from tests.web.test_accessibility import violations
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

ENTRIES = "/api/vault/entries"
PY_SECRET = "sk-from-python-0f9e8d7c6b5a"
PY_PHRASE = "python's long passphrase"
PAGE_SECRET = "sk-from-the-page-1a2b3c4d5e"
PAGE_PHRASE = "the page's own passphrase ✓"
OLD_SECRET = "sk-old-format-99887766"


def storage(person: Person) -> str:
    """Everything the page keeps in localStorage and sessionStorage."""
    kept: str = person.page.evaluate(
        "() => JSON.stringify([{...localStorage}, {...sessionStorage}])"
    )
    return kept


def mesh_link(person: Person, name: str) -> Any:
    nav = person.page.get_by_role("navigation", name="Rooms and people")
    return nav.get_by_role("link", name=re.compile(f"^{name}$"))


async def test_the_page_and_the_python_client_open_each_others_entries(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, _, _ = await two_people(node)
    http = node.mesh.http

    async def store(label: str, blob: str, provider: str | None = None) -> None:
        body = {"label": label, "blob": blob, "provider": provider}
        r = await http.post(ENTRIES, json=body, headers=alice_user.headers)
        assert r.status_code == 201, r.text

    async def entries() -> list[dict[str, Any]]:
        r = await http.get(ENTRIES, headers=alice_user.headers)
        assert r.status_code == 200, r.text
        return list(r.json())

    # written by the Python client: one in the new format, one in the old
    await store(
        "from-python",
        await trio.to_thread.run_sync(lambda: encrypt(PY_SECRET, PY_PHRASE, label="from-python")),
        "openai",
    )
    old = await trio.to_thread.run_sync(
        lambda: encrypt(OLD_SECRET, PY_PHRASE, label="old-one", version="v1")
    )
    await store("old-one", old)

    sent: list[str] = []

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            alice.page.on(
                "request", lambda r: sent.append(f"{r.method} {r.url} {r.post_data or ''}")
            )
            expect(alice.heading("#Town Square")).to_be_visible()
            mesh_link(alice, "Vault").click()
            expect(alice.heading("Vault", level=1)).to_be_visible()
            entries_table = alice.page.get_by_role("table", name="2 entries")
            expect(entries_table.get_by_role("row")).to_have_count(3)
            expect(entries_table).to_contain_text("from-python")
            expect(entries_table).to_contain_text("v1 (old)")

            # the page's module reads the known-answer vector Node.js made
            opened = alice.page.evaluate(
                """async ([blob, phrase, label]) => {
                    const vault = await import("/web/js/vaultcrypto.js");
                    return await vault.decrypt(blob, phrase, label);
                }""",
                [V2_VECTOR, PASSPHRASE, LABEL],
            )
            assert opened == SECRET

            # the page adds one: encrypted here, opened by the Python client
            alice.textbox("Label").fill("page-key")
            alice.textbox("Provider (optional)").fill("anthropic")
            alice.textbox("Secret").fill(PAGE_SECRET)
            alice.textbox("Passphrase").fill(PAGE_PHRASE)
            alice.textbox("Repeat the passphrase").fill(PAGE_PHRASE + "typo")
            alice.button("Encrypt and save").click()
            expect(
                alice.page.get_by_role("alert").filter(has_text="passphrases differ")
            ).to_be_visible()
            expect(alice.textbox("Passphrase")).to_have_value("")
            alice.textbox("Passphrase").fill(PAGE_PHRASE)
            alice.textbox("Repeat the passphrase").fill(PAGE_PHRASE)
            alice.button("Encrypt and save").click()
            expect(
                alice.page.get_by_role("status").filter(has_text="Saved page-key, encrypted.")
            ).to_be_visible()
            expect(alice.page.get_by_role("table", name="3 entries")).to_be_visible()
            for box in ("Secret", "Passphrase", "Repeat the passphrase", "Label"):
                expect(alice.textbox(box)).to_have_value("")
            stored = next(e for e in call(entries) if e["label"] == "page-key")
            assert stored["provider"] == "anthropic"
            assert stored["blob"].startswith("v2.600000.")
            assert decrypt(stored["blob"], PAGE_PHRASE, label="page-key") == PAGE_SECRET

            # Python's entry opens in the page, only when asked, with its passphrase
            secret = alice.textbox("Secret of from-python")
            expect(secret).to_have_count(0)
            alice.button("Show from-python").click()
            phrase = alice.textbox("Passphrase for from-python")
            expect(phrase).to_be_focused()
            phrase.fill("not the passphrase")
            alice.button("Decrypt").click()
            expect(
                alice.page.get_by_role("alert").filter(has_text="Wrong passphrase")
            ).to_be_visible()
            expect(phrase).to_have_value("")
            expect(secret).to_have_count(0)
            phrase.fill(PY_PHRASE)
            alice.button("Decrypt").click()
            expect(secret).to_have_value(PY_SECRET)
            expect(phrase).to_be_hidden()
            alice.heading("Vault", level=1).scroll_into_view_if_needed()
            shot(alice.page, "vault")
            assert violations(alice) == []
            alice.button("Hide the secret of from-python").click()
            expect(secret).to_have_count(0)
            assert PY_SECRET not in alice.page.content()

            # the old format: the page says where to open it
            alice.button("Show old-one").click()
            expect(alice.page.get_by_text("old format (v1, scrypt)")).to_be_visible()
            expect(alice.page.get_by_text("quart_mesh.vault_client", exact=False)).to_be_visible()
            alice.button("Close").click()

            # delete, after saying so
            alice.button("Delete page-key").click()
            alice.button("Delete for good").click()
            expect(
                alice.page.get_by_role("status").filter(has_text="Deleted page-key.")
            ).to_be_visible()
            expect(alice.page.get_by_role("table", name="2 entries")).to_be_visible()
            assert "page-key" not in [e["label"] for e in call(entries)]

            # nothing of the secrets or passphrases was kept or sent
            kept = storage(alice)
            for words in (PAGE_PHRASE, PAGE_SECRET, PY_PHRASE, PY_SECRET, PASSPHRASE, SECRET):
                assert words not in kept
                assert json.dumps(words)[1:-1] not in kept
                for request in sent:
                    assert words not in request
                    assert json.dumps(words)[1:-1] not in request
            posted = [r for r in sent if r.startswith(f"POST {node.url}{ENTRIES}")]
            assert len(posted) == 1
            assert stored["blob"] in posted[0]
            alice.assert_clean()

            # at 380 px wide: nothing scrolls sideways
            narrow = signed_in(browser, node.url, alice_user, width=380, height=800)
            expect(narrow.heading("#Town Square")).to_be_visible()
            narrow.page.goto(node.url + "/#vault")
            expect(narrow.page.get_by_role("table", name="2 entries")).to_be_visible()
            narrow.button("Show from-python").click()
            expect(narrow.textbox("Passphrase for from-python")).to_be_visible()
            wide = narrow.page.evaluate(
                "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert wide <= 0, wide
            shot(narrow.page, "vault-narrow")
            assert violations(narrow) == []
            narrow.assert_clean()

    await in_browser(scenario)


async def test_a_guest_is_not_offered_the_vault(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    await node.mesh.setup()

    def scenario() -> None:
        with chromium() as browser:
            guest = Person(browser, node.url)
            guest.open()
            guest.button("Continue as a guest").click()
            expect(guest.page.get_by_text("You are a guest")).to_be_visible()
            expect(mesh_link(guest, "Bots")).to_be_visible()
            expect(mesh_link(guest, "Vault")).to_have_count(0)
            guest.page.goto(node.url + "/#vault")
            expect(guest.page.get_by_text("You are a guest")).to_be_visible()
            expect(guest.heading("Vault", level=1)).to_have_count(0)
            guest.assert_clean()

    await in_browser(scenario)
