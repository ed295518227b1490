"""Machine stall probe: how late a 1 ms sleep wakes up, for DURATION seconds.

Run beside a latency measurement, pinned to the same CPU as the proxy: a
proxy's slowest response that matches the probe's worst wake-up was a stall
of the machine (the hypervisor, the kernel), not of the proxy. Prints one
line: "STALL max_ms=.. over20=.. samples=..".

    python3 stall_probe.py DURATION
"""

import sys
import time


def main() -> None:
    duration = float(sys.argv[1])
    end = time.monotonic() + duration
    worst = 0.0
    over = 0
    n = 0
    while True:
        t0 = time.monotonic()
        if t0 >= end:
            break
        time.sleep(0.001)
        late = (time.monotonic() - t0) * 1000.0 - 1.0
        n += 1
        worst = max(worst, late)
        if late > 20.0:
            over += 1
    print(f"STALL max_ms={worst:.2f} over20={over} samples={n}", flush=True)


if __name__ == "__main__":
    main()
