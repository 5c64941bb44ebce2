"""`sparkwatch-agent` command line: serve | stream --stdio | probe. Errors are one line, exit code 2; a probe
that could not read a GPU prints what it read and exits 1."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

from sparkwatch_agent import __version__
from sparkwatch_agent.assemble import assemble
from sparkwatch_agent.config import BACKENDS, AgentConfig, ConfigError, build_config, load_toml
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.serving.probe import EXIT_GPU_UNREAD, probe
from sparkwatch_agent.serving.serve import serve
from sparkwatch_agent.serving.stdio import run_stdio
from sparkwatch_agent.shared.auth import AuthConfigError
from sparkwatch_agent.shared.cli_flags import BooleanOnce, OneLineParser, refuse_unknown
from sparkwatch_agent.shared.http import BindError
from sparkwatch_agent.shared.journal_log import configure_logging
from sparkwatch_agent.shared.std_streams import EX_IOERR, drop_output, reopen_closed

PROG = "sparkwatch-agent"


def given_path(text: str) -> Path:
    """A path flag's value; an empty one (``--token-file ''``, a variable that was not set) names no file,
    where ``Path('')`` would be the working folder."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file")
    return Path(text)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node", help="node name in every sample and label (default: host name)")
    p.add_argument("--interval", type=float, metavar="SECONDS", help="sampling interval (default 1)")
    p.add_argument("--backend", choices=BACKENDS, help="nvml (default) or sim (a simulated GB10)")
    p.add_argument(
        "--config", type=given_path, metavar="FILE", help="TOML file with the same settings ([agent] table)"
    )
    p.add_argument(
        "--meminfo-path", type=given_path, metavar="FILE", help="meminfo file (default /proc/meminfo)"
    )
    p.add_argument(
        "--hwmon-root", type=given_path, metavar="DIR", help="hwmon class dir (default /sys/class/hwmon)"
    )
    p.add_argument(
        "--sim-sensors",
        action=BooleanOnce,
        help="with --backend sim: simulate spbm's system power channels (default yes)",
    )
    p.add_argument("--ring-size", type=int, metavar="N", help="samples kept for replay (default 36000)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def make_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="sparkwatch per-node telemetry agent")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve_p = sub.add_parser("serve", help="sample continuously; serve /metrics, /healthz and /v1/*")
    _add_common(serve_p)
    serve_p.add_argument("--listen", metavar="HOST:PORT", help="bind address (default 127.0.0.1:9464)")
    serve_p.add_argument(
        "--token-file", type=given_path, metavar="FILE", help="bearer token for /v1/* (mode 0600)"
    )
    serve_p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        default=None,
        help="allow binding off loopback without a token",
    )
    stream_p = sub.add_parser("stream", help="write the sample stream as JSON lines (for SSH)")
    stream_p.add_argument(
        "--stdio", action="store_true", required=True, help="frames on stdout, commands on stdin"
    )
    _add_common(stream_p)
    probe_p = sub.add_parser(
        "probe", help="print capabilities, hardware and one sample as JSON; exit 1 when no GPU was read"
    )
    _add_common(probe_p)
    for child in (serve_p, stream_p, probe_p):  # an unknown flag is said with its subcommand's usage
        child.set_defaults(subparser=child)
    return parser


def _config_from(args: argparse.Namespace) -> AgentConfig:
    file_values = load_toml(args.config) if args.config else {}
    flags = {
        "node": args.node,
        "interval": args.interval,
        "backend": args.backend,
        "listen": getattr(args, "listen", None),
        "token_file": str(args.token_file) if getattr(args, "token_file", None) else None,
        "insecure_no_auth": getattr(args, "insecure_no_auth", None),
        "ring_size": args.ring_size,
        "meminfo_path": str(args.meminfo_path) if args.meminfo_path else None,
        "hwmon_root": str(args.hwmon_root) if args.hwmon_root else None,
        "sim_sensors": args.sim_sensors,
    }
    return build_config(flags, file_values)


def _probe(sampler: Sampler) -> int:
    result = probe(sampler)
    try:
        print(json.dumps(result.report, indent=2), flush=True)
    except BrokenPipeError:  # its reader left (`| head`): stop quietly, as a shell's tools do
        drop_output(sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:  # `> /dev/full`: one line, not a traceback
        drop_output(sys.stdout.fileno())
        print(f"{PROG}: error: cannot write the probe to stdout: {exc.strerror or exc}", file=sys.stderr)
        return EX_IOERR
    if result.gpu_problem is not None:
        print(f"{PROG}: probe: no GPU read: {result.gpu_problem}", file=sys.stderr)
        return EXIT_GPU_UNREAD
    return 0


def main(argv: list[str] | None = None) -> int:
    replaced = reopen_closed()  # `2>&-`: before any file is opened (it would take fd 2)
    parser = make_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        refuse_unknown(parser, args, sys.argv[1:] if argv is None else argv, unknown)
    configure_logging(args.log_level)
    if args.command == "stream" and "stdout" in replaced:  # the stream would go to /dev/null, for ever
        print(f"{PROG}: error: stream --stdio: stdout is closed: nowhere to stream to", file=sys.stderr)
        return 2
    if args.command == "probe" and "stdout" in replaced:  # printed to /dev/null, exit 0: read by nobody
        print(f"{PROG}: error: cannot write the probe to stdout: it is closed", file=sys.stderr)
        return EX_IOERR
    try:
        config = _config_from(args)
        parts = assemble(config)
        if args.command == "serve":
            return asyncio.run(serve(config, parts.sampler, parts.sim))
        if args.command == "stream":
            return run_stdio(parts.sampler)
        return _probe(parts.sampler)
    except (ConfigError, AuthConfigError, BindError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, BindError) else 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
