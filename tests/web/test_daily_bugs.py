"""The six bugs of issue 32 seen in a day's use of the web client, each as
a person meets it: an over-size message, the phone's toolbar, the keyboard in
the timeline, the newest message kept in view, the toolbars, byte limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from quart_mesh.config import Limits
from tests.browser import Person, chromium, in_browser, shot
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


async def test_limits_are_said_in_human_units(
    browser_ready: None, serve_node: Any, tmp_path: Path
) -> None:
    """Bug 6: "at most 1 MB", never "at most 1048576 bytes"."""
    node: Served = await serve_node(limits=Limits(max_upload_bytes=1024 * 1024))
    alice_user, _bob_user, _room_id = await two_people(node)
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (1024 * 1024 + 10))

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            with alice.page.expect_file_chooser() as chooser:
                alice.button("Attach files").click()
            chooser.value.set_files(str(big))
            files = alice.page.get_by_role("list", name="Files to send")
            expect(files).to_contain_text("not uploaded")
            expect(files).to_contain_text("at most 1 MB")
            expect(files).not_to_contain_text("1048576")
            alice.assert_clean(console=False)  # the refused upload (413) is logged

    await in_browser(scenario)
