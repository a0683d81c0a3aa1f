"""What a command shows and keeps: :class:`Console` sends daskflow's own lines to the terminal (as far
as ``-v`` / ``-q`` ask) and every message, Dask's log messages and warnings and the traceback of a
failure to the command's log file; :func:`describe` turns an error into one line."""

from __future__ import annotations

import ast
import contextlib
import logging
import os
import re
import shlex
import sys
import time
import traceback
import warnings


class Console:
    """Where a command's messages go: the terminal, as far as ``verbosity`` asks, and the log file
    of the command once :meth:`open_log` named one (every message, Dask's log messages and warnings,
    and the traceback of a failure).

    ``verbosity``: ``-1`` (``-q``) errors and the final result only; ``0`` (default) daskflow's own
    lines, Dask's warnings and log messages (those of the embedded cluster's workers too) kept out
    of the terminal; ``1`` (``-v``) Dask's warnings and log messages on the terminal as well, and
    the traceback of a failure; ``2`` (``-vv``) Dask's info messages too."""

    def __init__(self, verbosity: int = 0) -> None:
        self.verbosity = verbosity
        self.log_path: str | None = None
        self.keep_log = True  # a temporary log is removed at close unless something failed
        self.failed = False
        self._log = None
        self._line_open = False  # an interactive progress line waits for its end
        self._undo: list = []

    # ------------------------------------------------------------------ the terminal

    def say(self, text: str) -> None:
        """One of daskflow's own lines (hidden by ``-q``)."""
        self._to_log(text)
        if self.verbosity >= 0:
            self._print(text)

    def result(self, text: str) -> None:
        """A line of the final result, shown even with ``-q``."""
        self._to_log(text)
        self._print(text)

    error = result

    def progress(self, text: str) -> None:
        """A progress line: rewritten in place on a terminal (``\\r``), one line each otherwise."""
        self._to_log(text)
        if self.verbosity < 0:
            return
        if sys.stderr.isatty():
            sys.stderr.write(f"\r{text}")
            sys.stderr.flush()
            self._line_open = True
        else:
            self._print(text)

    def end_line(self) -> None:
        if self._line_open:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._line_open = False

    def _print(self, text: str) -> None:
        self.end_line()
        print(text, file=sys.stderr, flush=True)

    def failure(self, prefix: str, exc: BaseException, where: str | None = None) -> None:
        """Report ``exc`` in one line (``prefix: what failed [where]; the log``) and keep its
        traceback in the log (on the terminal too with ``-v``)."""
        text = "".join(traceback.format_exception(exc)).rstrip()
        self._to_log(text)
        if self.verbosity >= 1:
            self.end_line()
            print(text, file=sys.stderr, flush=True)
        self.keep_log = self.failed = True
        if self.verbosity >= 1:
            hint = ""
        elif self.log_path:
            hint = f" (traceback in {self.log_path}; -v shows it here)"
        else:
            hint = " (-v shows the traceback)"
        message, own = describe(exc)
        if own:
            self.error(f"{prefix}: {message}{hint}")
        else:
            self.error(f"{prefix}: failed{' ' + where if where else ''}: {message}{hint}")

    # ------------------------------------------------------------------ the log file

    def open_log(self, path: str, keep: bool = True) -> None:
        """Append this command's messages, Dask's log messages and warnings and any traceback to
        ``path``; ``keep=False``: remove it at :meth:`close` unless something failed."""
        self._log = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.log_path, self.keep_log = str(path), keep
        self._to_log(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} daskflow {shlex.join(sys.argv[1:])} "
                     f"(pid {os.getpid()})")
        self._capture_dask()

    def worker_log(self) -> str | None:
        """The file the embedded cluster's workers write their output to (``None``: the terminal)."""
        return self.log_path if self.verbosity < 1 else None

    def dask_level(self) -> int:
        """The level of the embedded cluster's log messages."""
        return logging.INFO if self.verbosity >= 2 else logging.WARNING

    def close(self) -> None:
        """Put back the log handlers and warnings display replaced at :meth:`open_log`, and close
        the log (a temporary one is removed unless something failed)."""
        self.end_line()
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        if self._log is not None:
            self._log.close()
            self._log = None
            if not self.keep_log:
                with contextlib.suppress(OSError):
                    os.unlink(self.log_path)
                self.log_path = None

    def _to_log(self, text: str) -> None:
        if self._log is not None:
            self._log.write(text + "\n")

    def _capture_dask(self) -> None:
        """Dask's loggers (distributed, bokeh, tornado, asyncio, ...) write to the log; their
        terminal handlers stay only with ``-v``. daskflow's own logger keeps the terminal for its
        warnings (errors only with ``-q``); Python warnings go to the log, and to the terminal when
        they are daskflow's or with ``-v``."""
        handler = logging.StreamHandler(self._log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        root = logging.getLogger()
        for name in ["", *sorted(logging.root.manager.loggerDict)]:
            logger = logging.getLogger(name)
            if not isinstance(logger, logging.Logger) or name.startswith("daskflow"):
                continue
            terminal = [h for h in logger.handlers if type(h) is logging.StreamHandler
                        and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__)]
            if not terminal and logger is not root:
                continue
            self._add(logger, handler)
            if self.verbosity < 1:
                for h in terminal:
                    self._remove(logger, h)
        if self.verbosity >= 1 and not any(type(h) is logging.StreamHandler for h in root.handlers):
            terminal = logging.StreamHandler(sys.stderr)
            terminal.addFilter(lambda record: not record.name.startswith("daskflow"))  # shown below, once
            self._add(root, terminal, logging.WARNING)
        own = logging.StreamHandler(sys.stderr)
        own.setLevel(logging.ERROR if self.verbosity < 0 else logging.WARNING)
        self._add(logging.getLogger("daskflow"), own)
        shown = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
            self._to_log(text)
            if self.verbosity >= 1 or (self.verbosity == 0 and str(message).startswith("daskflow")):
                self._print(text)

        warnings.showwarning = showwarning
        self._undo.append(lambda: setattr(warnings, "showwarning", shown))

    def _add(self, logger, handler, level=None) -> None:
        if level is not None:
            handler.setLevel(level)
        logger.addHandler(handler)
        self._undo.append(lambda: logger.removeHandler(handler))

    def _remove(self, logger, handler) -> None:
        logger.removeHandler(handler)
        self._undo.append(lambda: logger.addHandler(handler))


#: the console of the command being run (the CLI sets its verbosity)
CONSOLE = Console()
#: daskflow's errors whose message says what happened and what to do (shown as they are)
OWN_ERRORS = ("StoreError", "NonFiniteState", "WorkerLost", "CheckpointError")


def describe(exc: BaseException) -> tuple[str, bool]:
    """``(one line, whether it is one of daskflow's own messages)`` for an error. Errors that Dask
    could not rebuild on the client arrive as a plain ``Exception("Name('message')")``: their name
    and message are recovered."""
    name, text = type(exc).__name__, " ".join(str(exc).split())
    own = type(exc).__module__.startswith("daskflow") and isinstance(exc, (RuntimeError, ValueError))
    stand_in = re.fullmatch(r"(\w+)\((.*)\)", text) if type(exc) is Exception else None
    if stand_in:
        with contextlib.suppress(ValueError, SyntaxError):
            args = ast.literal_eval(f"({stand_in.group(2)},)")
            name, text = stand_in.group(1), " ".join(" ".join(map(str, args)).split())
            own = name in OWN_ERRORS
    if len(text) > 600:
        text = text[:600] + " ..."
    return (text, True) if own else (f"{name}: {text}" if text else name, False)
