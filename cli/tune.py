"""``modelfn tune``: the best serving config, measured on the user's model and machine.

Thin: it checks the arguments, picks the load generator (wrk when it is on PATH, else the
aiohttp client; it never installs wrk), then runs ``tune.search`` over ``tune.measure``
(real servers, real load) with a progress bar, prints ``tune.report``'s tables and writes
the config or the report when asked. Only click is imported before a command runs, so
``--help`` stays fast.
"""

from __future__ import annotations

import datetime
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from modelfn.cli.errors import INTERRUPTED, exit_on_error
from modelfn.cli.params import DURATION, LEVELS, SIZE
from modelfn.cli.rows import check_rows_source, rows_per_request_option

if TYPE_CHECKING:
    from types import FrameType

    from modelfn.runtime.config import ModelConfig
    from modelfn.tune.search import SearchResult



@click.command("tune")
@click.argument("model_dir", metavar="REPO/NAME", type=click.Path(path_type=Path))
@click.option("--concurrency", "-c", "levels", type=LEVELS, default="1,8,32", show_default=True,
              help="Closed-loop client counts; each candidate is measured at every one.")
@click.option("--optimize-for", type=click.IntRange(min=1), metavar="C",
              help="The concurrency the function will serve: choose and write the config "
                   "with the most rows/s there, even if slower at the other levels "
                   "[default: the highest level, and not slower than the current config at "
                   "any].")
@click.option("--latency-budget-ms", type=click.FloatRange(min=0, min_open=True),
              help="Largest p99 a winner may have, ms.")
@click.option("--cpus", type=click.IntRange(min=1),
              help="Cores the function gets: the server is pinned to this many of this "
                   "process's cores, the load generator to the rest [default: all, shared].")
@click.option("--memory-budget", type=SIZE, help="Largest peak RSS a winner may have (2G, 512M).")
@click.option("--time-budget", type=DURATION, default="10m", show_default=True,
              help="Stop starting candidates when the next one would not fit "
                   "(90s, 10m, 3m45s, 1h). One that holds no search with the default "
                   "--duration measures with a shorter window.")
@click.option("--duration", type=DURATION, default="3s", show_default=True,
              help="Measured window per candidate and concurrency.")
@click.option("--warmup", type=DURATION, default="1s", show_default=True,
              help="Load before each window, not measured.")
@click.option("--max-batch", type=click.IntRange(min=1), default=64, show_default=True,
              help="Largest max_batch_size tried (never less than the rows per request).")
@rows_per_request_option("tune for clients that send batches. The doubling of "
                         "max_batch_size starts there.")
@click.option("--client", type=click.Choice(["auto", "wrk", "aiohttp"]), default="auto",
              show_default=True,
              help="Load generator: wrk (native, found on PATH) keeps a fast model's server "
                   "busy where the aiohttp client tops out near 5-7k requests/s on a core; "
                   "auto: wrk when it is on PATH, else aiohttp.")
@click.option("--binary", is_flag=True, help="Send tensors with the binary extension.")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A V2 request .json or a .npy array [default: random inputs from metadata].")
@click.option("--write", is_flag=True, help="Update REPO/NAME/config.pbtxt with the winner.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write tune.json, tune.csv and a chart (with the plot extra) here.")
def tune(model_dir: Path, levels: tuple[int, ...], optimize_for: int | None,
         latency_budget_ms: float | None, cpus: int | None, memory_budget: int | None,
         time_budget: float, duration: float, warmup: float, max_batch: int,
         rows_per_request: int | None, client: str, binary: bool, input_path: Path | None,
         write: bool, report_dir: Path | None) -> None:
    """Find the serving config with the most rows/s on this machine for the model in
    REPO/NAME, within the latency and memory budgets.

    Starts `modelfn serve` with candidate configs (instances, intra-op threads,
    max_batch_size, batching delay) and drives each with the load generator: first the
    current config, then batch sizes doubling while throughput grows, then instance x
    thread splits of the same cores, then a batching delay. Ctrl-C stops the search and
    keeps what was measured.
    """
    if optimize_for is not None and optimize_for not in levels:
        raise click.BadParameter(
            f"{optimize_for} is not one of the --concurrency levels "
            f"({','.join(map(str, levels))})", param_hint="'--optimize-for'")
    check_rows_source(rows_per_request, input_path)
    with exit_on_error():
        config = _check(model_dir, cpus)
        _denormal_advice(model_dir, config)
        wrk = _load_generator(client)
        load = "wrk" if wrk else "aiohttp"
        duration = _plan(time_budget, levels, duration, warmup, wrk)
        result = _run(model_dir, config, levels, optimize_for, latency_budget_ms, cpus,
                      memory_budget, time_budget, duration, warmup, max_batch,
                      rows_per_request or 1, binary, input_path, wrk)
        _show(result, model_dir, load, time_budget)
        if report_dir is not None:
            from modelfn.tune.report import write_report

            for line in write_report(result, report_dir, client=load):
                click.echo(line)
        if write:
            _write(result, model_dir, config, cpus, load)
    if result.stopped == "interrupted":
        raise SystemExit(INTERRUPTED)


def _check(model_dir: Path, cpus: int | None) -> ModelConfig | None:
    """The model's parsed config (None when it has none); refuses what cannot be tuned."""
    from modelfn.runtime.config_file import load_config
    from modelfn.tune.errors import ModelDirNotFound, TuneError

    if not model_dir.is_dir():
        raise ModelDirNotFound(str(model_dir), "no such directory")
    versions = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    if not versions:
        raise ModelDirNotFound(str(model_dir), "no version folder")
    have = len(os.sched_getaffinity(0))
    if cpus is not None and cpus > have:
        raise TuneError(f"--cpus {cpus}: this process may use only {have} core(s)")
    return load_config(model_dir)


def _denormal_advice(model_dir: Path, config: ModelConfig | None) -> None:
    """Point out denormal weights the config keeps: the search measures the weights as the
    config has them, and flushing them is the user's call (it changes the weights)."""
    from modelfn.cli.store import denormal_note

    if config is not None and "flush_denormal_weights" in config.parameters:
        return
    versions = sorted((p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()),
                      key=lambda p: int(p.name))
    filename = (config.default_model_filename if config is not None else "") or "model.onnx"
    note = denormal_note(versions[-1] / filename)
    if note is not None:
        click.echo(note, err=True)
        click.echo("note: tune measures the weights as config.pbtxt has them.", err=True)


def _load_generator(client: str) -> str | None:
    """wrk's path when wrk is to drive the load, None for the aiohttp client; says which.
    ``--client wrk`` without wrk on PATH is a usage error: tune never installs it."""
    from modelfn.client.wrk import INSTALL_HINT, find_wrk

    wrk = None if client == "aiohttp" else find_wrk()
    if wrk is None and client == "wrk":
        raise click.BadParameter(f"wrk is not on PATH: {INSTALL_HINT}, or use --client "
                                 "aiohttp", param_hint="'--client'")
    if wrk is not None:
        click.echo(f"load generator: wrk ({wrk})")
    elif client == "auto":
        click.echo("load generator: aiohttp (wrk is not on PATH; it tops out near 5-7k "
                   f"requests/s, so for a fast model {INSTALL_HINT})")
    else:
        click.echo("load generator: aiohttp")
    return wrk


def _plan(time_budget: float, levels: tuple[int, ...], duration: float, warmup: float,
          wrk: str | None) -> float:
    """The window to measure with: a budget that holds no search with the default one gets
    a shorter one where that fits; one that holds only the current config is said up front."""
    from click.core import ParameterSource

    from modelfn.tune.budget import plan

    source = click.get_current_context().get_parameter_source("duration")
    planned = plan(time_budget, levels, duration, warmup, wrk=wrk is not None,
                   duration_given=source is not ParameterSource.DEFAULT)
    if planned.note is not None:
        click.echo(f"note: {planned.note}", err=True)
    return planned.duration


def _run(model_dir: Path, config: ModelConfig | None, levels: tuple[int, ...],
         optimize_for: int | None, latency_budget_ms: float | None, cpus: int | None,
         memory_budget: int | None, time_budget: float, duration: float, warmup: float,
         max_batch: int, rows_per_request: int, binary: bool, input_path: Path | None,
         wrk: str | None) -> SearchResult:
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from modelfn.runtime.hardware import usable_cpus
    from modelfn.tune.candidates import Candidate, current
    from modelfn.tune.errors import BaselineFailed
    from modelfn.tune.measure import ServerMeasure, cpu_split
    from modelfn.tune.search import Budgets, Measurement, scored_level, search
    from modelfn.tune.workdir import workdir

    server_cpus, client_cpus = cpu_split(cpus)
    cores = cpus if cpus is not None else usable_cpus()
    started = time.monotonic()
    mine = os.sched_getaffinity(0)
    with (workdir() as scratch,
          Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                   transient=True) as progress):
        task = progress.add_task("starting", total=time_budget)

        def on_step(candidate: Candidate, what: str) -> None:
            progress.update(task, description=f"{candidate.describe()}: {what}",
                            completed=min(time.monotonic() - started, time_budget))

        top = scored_level(levels, optimize_for)

        def on_result(m: Measurement) -> None:
            outcome = (f"failed: {m.error}" if m.error
                       else f"{m.rows_per_s(top):,.1f} rows/s at c={top}")
            progress.console.print(f"  {m.candidate.label or 'candidate'}: "
                                   f"{m.candidate.describe()}: {outcome}", soft_wrap=True)

        measure = ServerMeasure(model_dir.resolve(), config, scratch, levels,
                                duration=duration, warmup=warmup, binary=binary,
                                input_path=input_path, rows_per_request=rows_per_request,
                                server_cpus=server_cpus, wrk=wrk,
                                client_cpus=client_cpus, on_step=on_step)
        if client_cpus is not None:
            os.sched_setaffinity(0, client_cpus)
        # SIGTERM (a CI timeout, a kill) ends the search like Ctrl-C, so the candidate's
        # server, in its own session, is stopped too instead of outliving tune
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            result = search(current(config), measure, cores=cores,
                            levels=levels, budgets=Budgets(latency_budget_ms, memory_budget),
                            time_budget_s=time_budget, max_batch=max_batch,
                            on_result=on_result, optimize_for=optimize_for)
        finally:
            signal.signal(signal.SIGTERM, previous)
            os.sched_setaffinity(0, mine)
            measure.close()
    if result.baseline is None and result.stopped == "interrupted":
        return result
    if result.baseline is None:
        raise BaselineFailed("interrupted")
    if result.refused is not None:
        rows = result.rows_per_request
        click.echo(f"note: the current config refuses every request (max_batch_size "
                   f"{result.refused.candidate.max_batch_size}, {rows} rows a request): it is "
                   f"compared as it would serve with max_batch_size {rows}", err=True)
    if result.baseline.error:
        if all(m.error for m in result.measurements):  # nothing serves: say why the current
            raise BaselineFailed(result.baseline.error)  # config, which the user ran, fails
        click.echo(f"note: the current config could not be measured "
                   f"({result.baseline.error}); the candidates are compared with each other",
                   err=True)
    return result


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the search as Ctrl-C does: through SIGINT's own handler where one is
    set. Inside the load generator's event loop that is asyncio.Runner's, which cancels
    the load; a KeyboardInterrupt raised from here instead can land in a transport
    callback, where uvloop logs it as a fatal transport error and the search goes on."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler is not signal.default_int_handler:
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


def _show(result: SearchResult, model_dir: Path, load: str, time_budget: float) -> None:
    from modelfn.cli.tables import table_console
    from modelfn.tune.budget import held_only_the_current
    from modelfn.tune.report import (
        candidates_table,
        held_back_note,
        noise_warning,
        summary_table,
    )

    console = table_console()
    if result.stopped == "interrupted":
        click.echo("interrupted: the results measured so far", err=True)
    elif result.stopped == "time budget" and result.needed_s is not None and len(
            result.measurements) == 1 + (result.refused is not None):
        click.echo(held_only_the_current(time_budget, result.needed_s, result.longest_s),
                   err=True)
    elif result.stopped == "time budget":
        click.echo("the time budget ran out before the search finished", err=True)
    if not result.measurements:
        return
    console.print(candidates_table(result))
    rows = result.rows_per_request
    carrying = "" if rows == 1 else f", {rows} rows per request"
    console.print(summary_table(result, title=f"modelfn tune {model_dir.name} "
                                              f"(load: {load}{carrying})"))
    warning = noise_warning(result)
    if warning is not None:
        click.echo(f"note: {warning}", err=True)
    held = held_back_note(result)
    if held is not None:
        click.echo(f"note: {held}", err=True)
    if result.chosen() is None:
        where = ("every concurrency" if result.optimize_for is None
                 else f"c={result.optimize_for}")
        click.echo(f"no candidate met the budgets at {where}: keep the current config",
                   err=True)


def _write(result: SearchResult, model_dir: Path, config: ModelConfig | None,
           cpus: int | None, load: str) -> None:
    import platform

    from modelfn.runtime.config import ModelConfig
    from modelfn.tune.candidates import apply, render
    from modelfn.tune.report import measurement_comment

    chosen = result.chosen()
    if result.stopped == "interrupted":
        click.echo("interrupted: config.pbtxt left unchanged", err=True)
        return
    if chosen is None:
        click.echo("config.pbtxt left unchanged: no candidate met the budgets", err=True)
        return
    if (chosen is result.baseline and result.refused is None) or chosen.candidate.as_is:
        kept = ("the current config stays (the note above says why)"
                if result.held_back() is not None else "the current config is the best measured")
        click.echo(f"{kept}: config.pbtxt left unchanged")
        return
    base = config if config is not None else ModelConfig(name=model_dir.name)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = f"{cpus} pinned core(s)" if cpus is not None else "all cores, shared"
    machine = f"{platform.machine()}, {where}, load from {load}"
    text = render(apply(base, chosen.candidate),
                  measurement_comment(result, chosen, when, machine))
    path = model_dir / "config.pbtxt"
    temporary = path.with_name(".config.pbtxt.tune")
    temporary.write_text(text)
    temporary.replace(path)
    click.echo(f"wrote {path}: {chosen.candidate.describe()}")
