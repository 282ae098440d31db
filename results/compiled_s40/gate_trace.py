"""The step gate's decisions during a bench run (docs/results.md, session 40: where jacobi's and lookahead's
losses came from): every probe with its wait and estimates, every parallel step and every step of an AR
stretch, on stderr, beside the bench's own output. Any ``fastforward bench`` arguments, e.g.

    python results/compiled_s40/gate_trace.py bench --model smollm2-135m --dataset mtbench --limit 3 \\
        --max-new-tokens 128 --threads 2 --dtype float32 --path auto --compile on --methods ar,lookahead \\
        2> trace.txt

It wraps ``StepGate.parallel`` and ``StepGate.record`` in this process only, to log them (the decisions
are unchanged).
"""

import sys

from fastforward.cli import main
from fastforward.core import pacing

_parallel, _record = pacing.StepGate.parallel, pacing.StepGate.record


def parallel(self: pacing.StepGate) -> bool:
    before = self.probes
    chosen = _parallel(self)
    if self.probes != before:
        print(
            f"PROBE wait={self.wait} backoff={self.backoff} tokens={self.tokens.value:.2f} "
            f"parallel_ms={self.parallel_ms.value:.1f} ar_ms={self.ar_ms.value:.1f}",
            file=sys.stderr,
        )
    return chosen


def record(self: pacing.StepGate, par: bool, tokens: int, ms: float) -> None:
    if par:
        print(f"  PARALLEL tokens={tokens} ms={ms:.1f} left_in_burst={self._left}", file=sys.stderr)
    elif self._ar_left > 0:
        print(f"  AR_STRETCH ms={ms:.1f} left={self._ar_left}", file=sys.stderr)
    _record(self, par, tokens, ms)


if __name__ == "__main__":
    pacing.StepGate.parallel, pacing.StepGate.record = parallel, record
    sys.argv = ["fastforward", *sys.argv[1:]]
    sys.exit(main())
