"""What validating a request body costs, per request, by each way considered
for the REST contract (decision 0047): the node's former hand-written
checks, msgspec decoding straight into the type (what the node does), and
quart-schema's path (``json.loads`` then a conversion) with msgspec or
pydantic, and pydantic decoding JSON itself.

    python bench/bench_validation.py [--runs 5]

quart-schema and pydantic are not dependencies of the node: install them
for the comparison (``pip install quart-schema==0.25.0 pydantic==2.14.4``);
rows whose library is missing are skipped. Prints the median over runs of
the best of 5 repeats of 20,000 calls, in microseconds, and each as a ratio
to msgspec's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import timeit
from collections.abc import Callable

import msgspec

from quart_mesh.wire import Fields, parse_json_object

RAW = json.dumps(
    {
        "content": "hello there, this is a message of moderate length",
        "clientId": "abc-123",
        "threadId": None,
    }
).encode()


class SendMessage(msgspec.Struct, rename="camel"):
    content: str
    to: str | None = None
    thread_id: str | None = None
    client_id: str | None = None
    attachments: list[str] | None = None


def candidates() -> dict[str, Callable[[], object]]:
    decoder = msgspec.json.Decoder(SendMessage)

    def hand_written() -> object:
        fields = Fields(parse_json_object(RAW))
        fields.req_str("content")
        fields.opt_str("to")
        fields.opt_str("threadId")
        fields.opt_str("clientId")
        return fields.data.get("attachments")

    found: dict[str, Callable[[], object]] = {
        "msgspec decode into the type (the node)": lambda: decoder.decode(RAW),
        "hand-written checks (before)": hand_written,
    }
    try:
        from quart_schema.conversion import model_load

        found["quart-schema + msgspec"] = lambda: model_load(
            json.loads(RAW), SendMessage, ValueError, decamelize=False, preference="msgspec"
        )
    except ImportError:
        pass
    try:
        from pydantic import BaseModel, ConfigDict
        from pydantic.alias_generators import to_camel

        class SendMessageModel(BaseModel):
            model_config = ConfigDict(alias_generator=to_camel)
            content: str
            to: str | None = None
            thread_id: str | None = None
            client_id: str | None = None
            attachments: list[str] | None = None

        found["pydantic model_validate_json"] = lambda: SendMessageModel.model_validate_json(RAW)
        if "quart-schema + msgspec" in found:
            from quart_schema.conversion import model_load

            found["quart-schema + pydantic"] = lambda: model_load(
                json.loads(RAW),
                SendMessageModel,
                ValueError,
                decamelize=False,
                preference="pydantic",
            )
    except ImportError:
        pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    results: dict[str, list[float]] = {}
    for _ in range(runs):
        for name, call in candidates().items():
            best = min(timeit.repeat(call, number=20_000, repeat=5)) / 20_000 * 1e6
            results.setdefault(name, []).append(best)
    base = statistics.median(results["msgspec decode into the type (the node)"])
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:42s} {median:6.2f} µs  {median / base:5.1f}x")


if __name__ == "__main__":
    main()
