"""`gpuroster` command line: one entry point, one subcommand per job.

Subcommands import their module lazily so `gpuroster bench` never loads the
Kubernetes client and `gpuroster serve` never loads matplotlib.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

USAGE = """usage: gpuroster COMMAND [ARGS...]

commands:
  bench     run policies over scenarios in the simulator (or on a cluster) and print the table
  serve     run the extender service and controller against a cluster
  plan      print the current plan of a running service
  demo      bring up the local control plane and replay a contended scenario
  check     check a result file against its scenario (legality and metrics)
  whatif    your cluster's past from Prometheus: what happened beside fifo and gpuroster
  cluster   the local control plane: build, up, down, status, kubeconfig, extender-port

`gpuroster COMMAND --help` for each command's options.
"""


def _load(command: str) -> Callable[[Sequence[str]], int] | None:
    if command == "bench":
        from extender import benchmarking

        return benchmarking.main
    if command == "check":
        from extender import checking

        return checking.check_main
    if command in ("serve", "plan"):
        import extender.controller.main as controller_main

        run: Callable[[Sequence[str]], int] = (
            controller_main.serve if command == "serve" else controller_main.plan
        )
        return run
    if command == "whatif":
        from extender.whatif import command as whatif_command

        return whatif_command.main
    if command == "cluster":
        from extender.localcluster import commands

        return commands.main
    if command == "demo":
        from extender import demo

        return demo.main
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    run = _load(args[0])
    if run is None:
        print(f"gpuroster: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
