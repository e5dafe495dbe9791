"""Console-script entry points: ``acp`` (``acp memory …``), ``acpmem`` (= ``acp memory``) and ``python -m acpmem``.

A per-turn command (``list``, ``recall``, ``commit``, ``hook claude-code``, ``show``, ``surface``, ``score``,
``stats``) whose arguments the fast path can parse exactly is answered without importing typer (``acpmem.cli.fast``,
from a table derived from the typer definitions); everything else — help, completion, anything unusual, any usage
error — goes to typer, which prints the same bytes for what both can do (a property test compares them).
``ACPMEM_NO_FASTPATH=1`` forces typer.
"""
from __future__ import annotations

import sys


def main(argv: list[str], prog: str) -> int:
    """Run one command line (``argv`` after the program name); ``prog`` is ``acp`` or ``acpmem``. The exit code."""
    from acpmem.cli.fast import try_fast
    from acpmem.cli.output import standard_output
    from acpmem.cli.progress import install

    with standard_output():   # the output's own failures and encoding, for every command (``cli.output``)
        install(argv)         # progress bars on a terminal only (``cli.progress``)
        code = try_fast(argv, prog)
        return run_typer(argv, prog) if code is None else code


def typer_app(prog: str = "acpmem"):
    """The typer application of ``prog`` (``acp``, or ``acpmem`` = the ``memory`` group), every command registered."""
    from acpmem.cli import app
    # registering order is the order `acp memory --help` lists the commands in
    from acpmem.cli import commands_vault, commands_read, commands_write, commands_review, commands_integrations  # noqa: F401, I001

    return app.root_app if prog == "acp" else app.app


def typer_command(prog: str):
    """The click command typer builds for ``prog``."""
    import typer

    return typer.main.get_command(typer_app(prog))


def run_typer(argv: list[str], prog: str) -> int:
    """The full command line. Usage errors are one ``Error: … — …`` line with exit 2, like every other error."""
    from acpmem.cli.output import guarded, warn
    from acpmem.core.errors import error_line

    def work() -> int:
        import typer
        from typer._click.exceptions import NoArgsIsHelpError, UsageError

        command = typer_command(prog)
        try:
            rv = command.main(args=list(argv), prog_name=prog, standalone_mode=False)
        except NoArgsIsHelpError as exc:   # `acp memory` alone: the help, as a usage error
            warn(exc.format_message())
            return exc.exit_code
        except UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else prog
            warn(error_line(exc.format_message(), f"see `{where} --help`"))
            return exc.exit_code
        except typer.Abort:
            warn("Aborted.")
            return 1
        except typer.TyperException as exc:
            warn(error_line(exc.format_message()))
            return getattr(exc, "exit_code", 1)
        if rv == 130:   # typer turns Ctrl-C into a silent exit 130; every acpmem command says it
            warn("Interrupted.")
        return rv if isinstance(rv, int) else 0

    return guarded(work)


def acpmem_main() -> None:
    from acpmem.cli.output import standard_descriptors

    standard_descriptors()
    sys.exit(main(sys.argv[1:], "acpmem"))


def acp_main() -> None:
    from acpmem.cli.output import standard_descriptors

    standard_descriptors()
    sys.exit(main(sys.argv[1:], "acp"))
