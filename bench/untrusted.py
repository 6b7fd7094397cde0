"""Content flags and first codes on the injection corpus (tests/corpus/injection.py).

Every mail of the corpus goes through ``sink.message.parse`` (what read_message answers
from). Printed: per flag, its precision and recall against the flags each case names;
first-code accuracy on the ordinary mails and on the hostile mails that show a code; links
exactly as a person sees them; and the parse time per mail.

    .venv/bin/python bench/untrusted.py           # about a second
    .venv/bin/python bench/untrusted.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sink.flags import FLAGS
from sink.message import parse
from tests.corpus.injection import HOSTILE, ORDINARY, Case


def _ratio(hits: int, total: int) -> str:
    return "-" if total == 0 else f"{hits / total:.1%} ({hits}/{total})"


def measure(cases: list[Case]) -> dict[str, object]:
    counts = {flag: {"tp": 0, "fp": 0, "fn": 0} for flag in FLAGS}
    first = {"ordinary": [0, 0], "hostile": [0, 0]}
    links = [0, 0]
    started = time.perf_counter()
    for case in cases:
        parsed = parse(case.raw)
        for flag in FLAGS:
            raised, named = flag in parsed.content_flags, flag in case.flags
            if raised and named:
                counts[flag]["tp"] += 1
            elif raised:
                counts[flag]["fp"] += 1
            elif named:
                counts[flag]["fn"] += 1
        if case.codes:
            kind = "hostile" if case.hostile else "ordinary"
            first[kind][1] += 1
            first[kind][0] += parsed.codes[:1] == case.codes[:1]
        links[1] += 1
        links[0] += parsed.links == case.links
    elapsed = time.perf_counter() - started
    return {
        "flags": counts,
        "first_code": first,
        "links": links,
        "ms_per_mail": elapsed * 1000 / len(cases),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures = measure(HOSTILE + ORDINARY)
    print(f"corpus: {len(HOSTILE)} hostile mails, {len(ORDINARY)} ordinary mails")
    print(f"{'flag':28} {'precision':>16} {'recall':>16}")
    flags = figures["flags"]
    assert isinstance(flags, dict)
    for flag, c in flags.items():
        precision = _ratio(c["tp"], c["tp"] + c["fp"])
        recall = _ratio(c["tp"], c["tp"] + c["fn"])
        print(f"{flag:28} {precision:>16} {recall:>16}")
    total = {k: sum(c[k] for c in flags.values()) for k in ("tp", "fp", "fn")}
    print(
        f"{'all flags':28} {_ratio(total['tp'], total['tp'] + total['fp']):>16} "
        f"{_ratio(total['tp'], total['tp'] + total['fn']):>16}"
    )
    first = figures["first_code"]
    assert isinstance(first, dict)
    print(f"first code right, ordinary mail: {_ratio(*first['ordinary'])}")
    print(f"first code right, hostile mail with a visible code: {_ratio(*first['hostile'])}")
    links = figures["links"]
    assert isinstance(links, list)
    print(f"links exactly as a person sees them: {_ratio(*links)}")
    print(f"parse, per mail: {figures['ms_per_mail']:.2f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
