"""What every `farm` command shares: the Typer apps, the option types, and how a user's mistake or a stop ends a
command (one line, its exit code)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
from typer.core import TyperGroup

from cluster.workload import AR_FORMAT_BYTES, KV_FORMAT_BYTES
from stages.config import DECODE_PRECISIONS, DEFAULT_DECODE_PRECISION
from stages.protocol import COT_MODES

from ..models import model_config_names

HELP = {"help_option_names": ["-h", "--help"]}


class OneLineUsageErrors(TyperGroup):
    """The root command: a mistake on the command line (a missing or unknown option, a value of the wrong type, an
    unknown command) ends like every other user error: one line naming the flag, exit 2 — not click's usage block
    and Typer's error box. Everything else ends as in click's standalone mode."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as exc:       # typer's click: a usage error, a bad value, a missing file
            if type(exc).__name__ == "NoArgsIsHelpError":          # that one has printed the help already
                sys.exit(2)
            ctx = getattr(exc, "ctx", None)
            where, hint = (f"{ctx.command_path}: ", f" (see {ctx.command_path} -h)") if ctx is not None else ("", "")
            message = exc.format_message().replace("Value error, ", "")      # pydantic's prefix on a bad choice
            typer.echo(f"error: {where}{message}{hint}", err=True)
            sys.exit(getattr(exc, "exit_code", 2))
        except typer.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, rich_markup_mode="rich", add_completion=False,
                  context_settings=HELP, help="yue2-farm: render YuE2-3B songs and albums across the GPUs you have.")
bench_app = typer.Typer(no_args_is_help=True, context_settings=HELP,
                        help="Benchmarks: tables against the H200 floors (docs/benchmarks.md).")
app.add_typer(bench_app, name="bench")

# Exit codes (README, "Exit codes"): 0 done; 1 a crash (a bug: the traceback is in the crash log); 2 bad input;
# 3 the album finished but some tracks failed (their reasons are printed and kept in the album folder);
# 130 / 143 stopped by Ctrl-C / SIGTERM (the same command resumes).
EXIT_FAILED_TRACKS = 3


def _version(show: bool) -> None:
    if show:
        from .. import __version__

        typer.echo(f"yue2-farm {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    """yue2-farm: render YuE2-3B songs and albums across the GPUs you have."""


def one_of(*values: str):
    """A choice typer checks and lists in the help (<a|b|c>); a wrong one ends in one line (OneLineUsageErrors).
    The values come from their one home (the formats from cluster/workload.py, the rest from stages/)."""
    return Literal[values]


AR_FORMATS, KV_FORMATS = tuple(AR_FORMAT_BYTES), tuple(KV_FORMAT_BYTES)
ArFormat, KvFormat, QuantFormat = one_of(*AR_FORMATS), one_of(*KV_FORMATS), one_of(*AR_FORMATS[1:])
Cot = one_of(*COT_MODES)
DecodePrecision = one_of(*DECODE_PRECISIONS)
ModelConfig = one_of(*model_config_names())
ModelOpt = Annotated[str, typer.Option("--model", "-m", envvar="FARM_MODEL",
                                       help="'tiny' (random, created on first use) or a checkpoint directory.")]
VaeOpt = Annotated[str | None, typer.Option("--vae", help="VAE directory, when --model is a bare model dir.")]
KvOpt = Annotated[KvFormat, typer.Option("--kv-cache", help="The AR KV cache: bf16 (the model's dtype) or fp8 (e4m3: "
                                         "half the bytes a step reads; other songs).")]
ArFormatOpt = Annotated[ArFormat, typer.Option("--format", "--ar-format", help="The AR step's weights: bf16 (the "
                                               "model's own), fp8 (one scale per output channel) or nvfp4 (FP4, a "
                                               "scale per 16 values), quantised when the engine starts.")]
# farm song / render: the AR weights' format, or None for the album's (else bf16, or the AR checkpoint's)
ArFormatFlag = Annotated[ArFormat | None, typer.Option("--ar-format", help="The AR step's weights: bf16, fp8 or nvfp4 "
                                                       "(the model's own, quantised when the engines load; other "
                                                       "songs). Default: the album's ar_format, else bf16, or the "
                                                       "--ar-checkpoint's format.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
DecodePrecisionOpt = Annotated[DecodePrecision, typer.Option(
    help=f"The VAE's convolutions: tf32x3 (tensor cores at FP32's accuracy on Hopper, cuDNN FP32 on other cards), "
         f"fp32 (cuDNN FP32 on every card) or tf32 (audio ~3e-4 from FP32; another song's bytes). Default: "
         f"{DEFAULT_DECODE_PRECISION}.")]


def writable_file(path: Path | None) -> Path | None:
    """An output file's check when the command line is read (a typer callback): its folder must take a new file now,
    so that a benchmark's minutes of work are not lost to a path it cannot write at the end."""
    import tempfile

    if path is None:
        return None
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a folder, not a file")
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".farm-write-check-"):
            pass
    except OSError as exc:
        raise typer.BadParameter(f"{path}: cannot write in {path.parent} ({exc.strerror or exc})") from None
    return path


def writable_folder(path: Path | None) -> Path | None:
    """A folder a command will create or fill: it, or the nearest folder above it that exists, must take a new entry
    now (a typer callback, like `writable_file`)."""
    import shutil
    import tempfile

    if path is None:
        return None
    if path.exists() and not path.is_dir():
        raise typer.BadParameter(f"{path} is a file, not a folder")
    base = next(p for p in (path, *path.parents) if p.exists())
    try:
        shutil.rmtree(tempfile.mkdtemp(dir=base, prefix=".farm-write-check-"))
    except OSError as exc:
        raise typer.BadParameter(f"{path}: cannot write in {base} ({exc.strerror or exc})") from None
    return path


# the benchmarks' report file and the headline keys they update
JsonOutOpt = Annotated[Path | None, typer.Option("--json", help="Also write the report as JSON here.",
                                                 callback=writable_file)]
SummaryOpt = Annotated[Path | None, typer.Option(help="Update the headline keys (docs/measured/summary.json).",
                                                 callback=writable_file)]
# `--json PATH` writes a report file (the benchmarks); `--output` is how `plan` and `simulate` print; `--format` is
# always an AR weight format (`farm quantize`, `farm bench ar|song`).
OutputOpt = Annotated[one_of("table", "json"), typer.Option("--output", help="How to print it: table or json.")]


def _as_json(output: str) -> bool:
    return output == "json"


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def guarded(fn, *args, **kwargs):
    """Run a library call; a user error becomes one line on stderr and exit code 2."""
    from ..errors import user_error_types

    try:
        return fn(*args, **kwargs)
    except user_error_types() as exc:
        fail(str(exc))
    except FileExistsError as exc:
        fail(str(exc))


def interruptible(fn, *args, **kwargs):
    """Ctrl-C (exit 130) and SIGTERM (exit 143) stop a render cleanly: finished stages stay on disk, live.json says
    `stopped`, and the message says that the same command resumes."""
    import signal

    from ..driver import Stopped

    def on_term(signum, frame):
        raise Stopped()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return fn(*args, **kwargs)
    except (KeyboardInterrupt, Stopped) as exc:
        code = 130 if isinstance(exc, KeyboardInterrupt) else Stopped.exit_code
        typer.echo(f"stopped ({'Ctrl-C' if code == 130 else 'SIGTERM'}); finished stages are kept — run the same "
                   f"command again to resume", err=True)
        raise typer.Exit(code) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
