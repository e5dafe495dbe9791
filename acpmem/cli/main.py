"""Console-script entry points: ``acp`` (``acp memory …``), ``acpmem`` (= ``acp memory``) and ``python -m acpmem``.

A per-turn command (``list``, ``recall``, ``commit``, ``hook claude-code``, ``show``, ``surface``, ``score``,
``stats``, ``serve``), one a host runs at a session's start (``tools``, ``nudge``) or one run by hand
(``remember``, ``init``, ``doctor``, ``sync``) whose arguments the fast path can parse exactly is answered without
importing typer (``acpmem.cli.fast``, from a table derived from the typer definitions); everything else — help,
completion, anything unusual, any usage error — goes to typer, which prints the same bytes for what both can do (a
property test compares them).
``ACPMEM_NO_FASTPATH=1`` forces typer.
"""
import os
import sys

from acpmem.cli.relay import READS, command_of, is_read, report_interrupt, standard_descriptors, try_server


def main(argv: list[str], prog: str) -> int:
    """Run one command line (``argv`` after the program name); ``prog`` is ``acp`` or ``acpmem``. The exit code."""
    # lazy: a read the read server runs does not need them here (``acpmem.cli.relay``; measured +9 ms to its start-up)
    from acpmem.cli.fast import try_fast
    from acpmem.cli.output import json_errors, standard_output, wants_json
    from acpmem.cli.progress import install

    # the output's own failures and encoding, for every command; with --json, failures as JSON (``cli.output``)
    with standard_output(), json_errors(wants_json(argv)):
        install(argv)         # progress bars on a terminal only (``cli.progress``)
        code = try_fast(argv, prog)
        return run_typer(argv, prog) if code is None else code


def typer_app(prog: str = "acpmem"):
    """The typer application of ``prog`` (``acp``, or ``acpmem`` = the ``memory`` group), every command registered."""
    # lazy: the frozen `list --format prompt --session` does not need it (measured +32 ms to its start-up)
    from acpmem.cli import app
    # registering order is the order `acp memory --help` lists the commands in
    # lazy: the frozen `list --format prompt --session` does not need them (measured +52 ms to its start-up)
    from acpmem.cli import commands_vault, commands_read, commands_write, commands_review, commands_integrations  # noqa: F401, I001
    from acpmem.cli import commands_branches, commands_porting  # noqa: F401

    return app.root_app if prog == "acp" else app.app


_BUILT: dict = {}


def typer_command(prog: str):
    """The click command typer builds for ``prog``, built once per process and per set of registered commands: a
    process that runs several command lines (the test suite's in-process ``main``) would otherwise rebuild every
    command's parameters from the signatures each time, ~25 ms a call. Typer reads one variable while it builds
    (whether ``--install-completion`` takes the shell's name), so it is part of the key."""
    # lazy: typer is heavy, never imported at start-up
    import typer

    app = typer_app(prog)
    key = (prog, id(app), tuple(map(id, app.registered_commands)), tuple(map(id, app.registered_groups)),
           os.environ.get("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"))
    if key not in _BUILT:
        _BUILT[key] = typer.main.get_command(app)
    return _BUILT[key]


def run_typer(argv: list[str], prog: str) -> int:
    """The full command line. Usage errors are one ``Error: … — …`` line with exit 2, like every other error (with
    ``--json``, the JSON error object)."""
    # lazy: a read the read server runs does not need them here (``acpmem.cli.relay``; measured +9 ms to its start-up)
    from acpmem.cli.output import fail, guarded, interrupted, warn

    def work() -> int:
        # lazy: typer is heavy, never imported at start-up
        import typer
        from typer._click.exceptions import NoArgsIsHelpError, NoSuchOption, UsageError

        command = typer_command(prog)
        try:
            rv = command.main(args=list(argv), prog_name=prog, standalone_mode=False)
        except NoArgsIsHelpError as exc:   # `acp memory` alone: the help, as a usage error
            warn(exc.format_message())
            return exc.exit_code
        except UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else prog
            hint = f"see `{where} --help`"
            if isinstance(exc, NoSuchOption) and exc.ctx is not None and _takes_text(exc.ctx.command) \
                    and not (exc.option_name or "").startswith("--"):
                hint += f"; a value that starts with '-' goes last, after `--`: `{where} [OPTIONS] -- '- text'`"
            return fail(usage_message(exc.format_message()), hint, code="usage", exit_code=exc.exit_code)
        except typer.Abort:
            return fail("aborted", None, code="aborted")
        except typer.TyperException as exc:
            return fail(exc.format_message(), None, code="usage" if getattr(exc, "exit_code", 1) == 2 else "error",
                        exit_code=getattr(exc, "exit_code", 1))
        if rv == 130:   # typer turns Ctrl-C into a silent exit 130; every acpmem command says it
            return interrupted()
        return rv if isinstance(rv, int) else 0

    return guarded(work)


def usage_message(text: str) -> str:
    """A usage error of the parser in our words: no pydantic phrasing ("Value error, ", "Input should be …")."""
    return (text.replace("Value error, ", "")
            .replace("Input should be a valid integer, unable to parse string as an integer", "not an integer")
            .replace("Input should be ", "it should be "))


def _takes_text(command) -> bool:
    """Whether a command has a positional argument (text, a query, an id), which could start with '-'."""
    return any(type(p).__name__ == "TyperArgument" for p in getattr(command, "params", ()))


def _run(prog: str) -> None:
    argv = sys.argv[1:]
    try:
        standard_descriptors()
        code = try_server(argv, prog)
        if code is None:   # run here: pathlib is about to load (a served read's client never loads it)
            # lazy: the console scripts loaded it already; a served read's client needs nothing more than the relay
            from acpmem.cli.startup import lighter_pathlib

            lighter_pathlib()
            if command_of(argv, prog) not in READS | {"serve"}:
                # a command that may write, and then the process ends (the MCP server stays): its commits go to
                # the git executable unless pygit2 is loaded already (``acpmem.infra.proc.one_command``)
                from acpmem.infra import proc

                proc.one_command = True
            code = main(argv, prog)
    except KeyboardInterrupt:   # before the command's own handling is in place (or after it): said as by a command
        code = report_interrupt(argv)
    if is_read(argv, prog):
        leave(code)
    sys.exit(code)


def leave(code: int) -> None:
    """End a read's process now, with ``code``, without the interpreter's teardown — freeing every module and object
    one by one, ~5 ms of a 50 ms read and ~1.5 ms of a served read's client, whose command ran elsewhere — when
    nothing is left for the teardown to do: no other thread to wait for, no exit handler, the standard streams
    flushed. Otherwise (or when a flush fails) it returns, and the process ends the usual way. A read closes its
    vault before it returns (``VaultReader`` is a context manager), so no file or database is left open here."""
    if not isinstance(code, int) or isinstance(code, bool):
        return
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return
    import atexit   # built into the interpreter: nothing to load
    pending = getattr(atexit, "_ncallbacks", None)
    if pending is None or pending():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            return
    os._exit(code & 0xFF)


def acpmem_main() -> None:
    _run("acpmem")


def acp_main() -> None:
    _run("acp")
