"""Would a bounded spin before sleeping lower a blocking client's CPU per round trip?

``Producer.send`` writes its request and sleeps in ``recv`` until the answer arrives; on
this VM the sleep and the wake-up are a large share of the client's CPU per send. A spin
(polling the socket with non-blocking reads for up to a budget before sleeping) saves the
sleep when the answer arrives within the budget, and costs the budget's CPU when it does
not. This measures it with the cheapest spin there is: a C client (compiled here with
``cc``, the same loop a kernel would run: ``send``, then ``recv(MSG_DONTWAIT)`` until data or
the budget, then a blocking ``recv``) against ``bench_floor.py``'s canned server, answering
after each ``--delays-us`` (0: at once; a broker answers a one-in-flight send in ~10-20 µs),
for each ``--spins-us`` budget, interleaved, medians of ``--rounds``, with the load average.

    python bench/bench_spin.py --delays-us 0,8,30 --spins-us 0,2,5,10,20,40 --n 5000 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_floor  # noqa: E402

C_CLIENT = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
static double clk(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char** argv) {
    int port = atoi(argv[1]), n = atoi(argv[2]); double spin_s = atof(argv[3]) * 1e-6;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a; memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_port = htons(port); a.sin_addr.s_addr = htonl(0x7f000001);
    if (connect(fd, (struct sockaddr*)&a, sizeof a)) { perror("connect"); return 1; }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* a 200-byte remoting frame: length, JSON header length 2 ("{}"), filler */
    unsigned char frame[200], buf[8192]; memset(frame, 'x', sizeof frame);
    frame[0] = 0; frame[1] = 0; frame[2] = 0; frame[3] = 196; frame[4] = 0; frame[5] = 0; frame[6] = 0; frame[7] = 2;
    frame[8] = '{'; frame[9] = '}';
    long caught = 0;
    double c0 = clk(CLOCK_PROCESS_CPUTIME_ID), t0 = clk(CLOCK_MONOTONIC);
    for (int i = 0; i < n; i++) {
        if (send(fd, frame, sizeof frame, MSG_NOSIGNAL) != sizeof frame) { perror("send"); return 1; }
        long got = 0, need = -1;
        if (spin_s > 0) {
            double end = clk(CLOCK_MONOTONIC) + spin_s;
            while (clk(CLOCK_MONOTONIC) < end) {
                long r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
                if (r > 0) { got = r; caught++; break; }
            }
        }
        while (need < 0 || got < need) {
            if (got >= 4) need = 4 + ((long)buf[0] << 24 | buf[1] << 16 | buf[2] << 8 | buf[3]);
            if (need >= 0 && got >= need) break;
            long r = recv(fd, buf + got, sizeof buf - got, 0);
            if (r <= 0) { perror("recv"); return 1; }
            got += r;
        }
    }
    printf("{\"cpu_us\": %.3f, \"wall_us\": %.3f, \"caught\": %.3f}\n", (clk(CLOCK_PROCESS_CPUTIME_ID) - c0) / n * 1e6,
           (clk(CLOCK_MONOTONIC) - t0) / n * 1e6, (double)caught / n);
    return 0;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delays-us", default="0,8,30", help="the server's spin before each answer, comma-separated")
    ap.add_argument("--spins-us", default="0,2,5,10,20,40", help="the client's spin budgets, comma-separated")
    ap.add_argument("--n", type=int, default=5000, help="round trips per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("bench_spin needs a C compiler (cc)")
    delays = [float(x) for x in args.delays_us.split(",")]
    spins = [float(x) for x in args.spins_us.split(",")]
    rows: dict[tuple[float, float], list[dict]] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="mqspin") as tmp:
        src, exe = os.path.join(tmp, "spin.c"), os.path.join(tmp, "spin")
        with open(src, "w") as f:
            f.write(C_CLIENT)
        subprocess.run([cc, "-O2", "-o", exe, src], check=True)
        for rnd in range(args.rounds):
            for delay in delays:
                port = bench_floor.free_port()
                server = bench_floor.Child([sys.executable, bench_floor.__file__, "--serve", f"canned:{delay}", str(port)])
                try:
                    for spin in spins:  # interleaved: every budget sees the same server and load
                        out = subprocess.run([exe, str(port), str(args.n), str(spin)], capture_output=True, text=True,
                                             check=True, timeout=300).stdout
                        row = {"delay_us": delay, "spin_us": spin, **json.loads(out), "round": rnd,
                               "loadavg_1m": os.getloadavg()[0]}
                        loads.append(row["loadavg_1m"])
                        rows.setdefault((delay, spin), []).append(row)
                        print(json.dumps(row), flush=True)
                finally:
                    server.stop()
    print(f"\n| server delay µs | spin budget µs | client CPU µs per trip | µs per trip | answers caught spinning "
          f"(median of {args.rounds}, load {min(loads):.1f}-{max(loads):.1f}) |")
    print("|---:|---:|---:|---:|---:|")
    for (delay, spin), rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("cpu_us", "wall_us", "caught")}
        print(f"| {delay:g} | {spin:g} | {med['cpu_us']:.2f} | {med['wall_us']:.1f} | {med['caught']:.0%} |")


if __name__ == "__main__":
    main()
