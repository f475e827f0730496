"""Portable host-death guard: a watchdog built from what every POSIX system offers.

Used where the Linux guard's primitives (child subreaper, parent-death signal, /proc) do
not exist, e.g. macOS and the BSDs, and on Linux when forced (``docs/platforms.md``).
It imports the standard library and psutil only, and runs as
``python -I -S _portable_guard.py STATUS_FD LIFELINE_FD LC_CTYPE GRACE PSUTIL_DIR POLICY
PROGRAM [ARG...]``; the host starts it in a new session with the product's stdio, cwd and
environment. ``POLICY`` is ``-`` or the product's Landlock confinement as one word (Linux
only, where this guard runs when forced): the forked child applies it to itself right
before ``exec`` (``_landlock.py``), as the Linux guard does.

The guard

* forks and execs the product in its own session and process group (it is the group's
  leader) and keeps its own fds 0/1/2 on /dev/null;
* reports on the status pipe ``P <pid>`` (started), ``E <errno>`` (exec failed) or
  ``L <errno>`` (the kernel refused the confinement; nothing started), then
  ``X <code>`` or ``S <signum>`` as soon as the product exits, as the Linux guard does;
* remembers every process it has ever seen in the tree (create-time fenced psutil
  handles): the descendants of itself and of every member seen before (so one that was
  re-parented after its parent died stays known), and every member of its process group.
  It looks again every few milliseconds (more often right after the tree changed) and, on
  macOS and the BSDs, at once when kqueue reports that a member forked (``NOTE_FORK``;
  ``NOTE_TRACK`` attaches to the new child directly where the kernel still offers it);
* exits, mirroring the product's exit, only once the product is reaped and nothing it
  has seen is alive, so its own liveness tells the host the tree lives;
* on SIGTERM (the host sends it to the guard alone) looks at the tree once more, then
  sends SIGTERM to its process group and to every member outside it (``setsid``, double
  fork), now and as they are found;
* on the lifeline (a pipe only the host writes): a ``K`` byte means "kill now" (the host's
  escalation and exit path): every member gets SIGKILL; EOF without it means the host
  died: SIGTERM to the group and every member, then SIGKILL after the grace (capped at
  :data:`_HOST_DEATH_GRACE_CAP` seconds: a dead host waits for no answer).

What it cannot do: a process that double-forks and is re-parented (to init) before the
guard first sees it is not known, and so not signalled. ``docs/platforms.md`` states and
measures that window.
"""

# _signal, not signal: the latter imports enum, a few ms of start-up for every product.
import _signal as signal  # type: ignore[import-not-found]
import marshal
import os
import select
import sys
import time

# kqueue's names exist on macOS and the BSDs only; reached through the module object
# (attributes typed loosely) so one source type-checks everywhere, mypy running on Linux.
_kq = sys.modules["select"]

_EXEC_FAILED = 127
_SCAN_FAST_SECONDS = 0.005  # right after start or a change in the tree
_SCAN_SLOW_SECONDS = 0.1  # the interval it backs off to while the tree is stable
_HOST_DEATH_GRACE_CAP = 1.0
_KILL_POLL_SECONDS = 0.005


def _ignore(signum: int, frame: object) -> None:
    pass


def _write(fd: int, text: str) -> None:
    try:  # noqa: SIM105 - contextlib costs start-up time
        os.write(fd, text.encode("ascii"))
    except OSError:
        pass  # the host is gone: the lifeline will say so


class _Tree:
    """Every process the guard has seen in its tree, fenced on create time."""

    def __init__(self, psutil: object, product: int) -> None:
        self.psutil = psutil
        self.me = os.getpid()
        self.group = os.getpgrp()
        self.seen: dict[int, object] = {}
        self.termed: set[int] = set()
        self.terminating = False
        self._add(product)

    def _add(self, pid: int) -> bool:
        if pid == self.me or pid in self.seen:
            return False
        try:
            self.seen[pid] = self.psutil.Process(pid)  # type: ignore[attr-defined]
        except Exception:  # psutil.Error: gone meanwhile
            return False
        return True

    def _alive(self, proc: object) -> bool:
        try:
            return bool(proc.is_running()) and proc.status() != "zombie"  # type: ignore[attr-defined]
        except Exception:  # NoSuchProcess: gone; AccessDenied cannot happen for our own
            return False

    def live(self) -> list[object]:
        """The members alive now; the dead ones are forgotten."""
        members = []
        for pid, proc in list(self.seen.items()):
            if self._alive(proc):
                members.append(proc)
            else:
                del self.seen[pid]
                self.termed.discard(pid)
        return members

    def _ppids(self) -> dict[int, int]:
        """Every process's parent, in one pass over the process table.

        psutil's per-platform ``ppid_map`` (one sysctl on macOS and the BSDs, one read of
        each ``/proc/<pid>/stat`` on Linux) is what its own ``children()`` uses; it is
        several times cheaper than a ``process_iter``, which this falls back to.
        """
        ppid_map = getattr(getattr(self.psutil, "_psplatform", None), "ppid_map", None)
        if ppid_map is not None:
            try:
                return dict(ppid_map())
            except Exception:  # a platform quirk: take the public, slower way
                pass
        found = {}
        for proc in self.psutil.process_iter(["ppid"]):  # type: ignore[attr-defined]
            if proc.info.get("ppid") is not None:
                found[proc.pid] = proc.info["ppid"]
        return found

    def scan(self) -> list[int]:
        """Look for new members; return their pids (already remembered)."""
        children: dict[int, list[int]] = {}
        for pid, ppid in self._ppids().items():
            children.setdefault(ppid, []).append(pid)
        found: list[int] = []
        frontier = [self.me, *self.seen]
        while frontier:
            for pid in children.get(frontier.pop(), ()):
                if self._add(pid):
                    found.append(pid)
                    frontier.append(pid)
        for kids in list(children.values()):
            for pid in kids:
                if pid in self.seen or pid == self.me:
                    continue
                try:
                    in_group = os.getpgid(pid) == self.group
                except OSError:
                    continue
                if in_group and self._add(pid):
                    found.append(pid)
        return found

    def signal_outside_group(self, pids: list[int] | None = None) -> None:
        """SIGTERM each live member outside the group that has not had one yet."""
        for pid in list(self.seen) if pids is None else pids:
            proc = self.seen.get(pid)
            if proc is None or pid in self.termed:
                continue
            try:
                if os.getpgid(pid) != self.group:
                    proc.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
                    self.termed.add(pid)
            except Exception:  # gone meanwhile (psutil.Error or OSError)
                pass

    def term_all(self) -> None:
        try:  # noqa: SIM105 - contextlib costs start-up time
            os.killpg(self.group, signal.SIGTERM)  # this guard ignores it
        except OSError:
            pass
        self.signal_outside_group()

    def kill_all(self) -> None:
        for proc in self.live():
            try:  # noqa: SIM105 - contextlib costs start-up time
                proc.send_signal(signal.SIGKILL)  # type: ignore[attr-defined]
            except Exception:  # gone meanwhile
                pass


class _Waiter:
    """Waits for the lifeline, a signal, a fork or exit in the tree, or a timeout.

    kqueue where the platform has it (process events narrow the discovery window),
    otherwise poll.
    """

    def __init__(self, fds: tuple[int, ...]) -> None:
        self._poller = None
        kqueue = getattr(_kq, "kqueue", None)
        self._kq = None if kqueue is None else kqueue()
        if self._kq is not None:
            try:
                changes = [
                    _kq.kevent(fd, filter=_kq.KQ_FILTER_READ, flags=_kq.KQ_EV_ADD) for fd in fds
                ]
                self._kq.control(changes, 0, 0)
            except OSError:
                self._kq = None
        if self._kq is None:
            # poll, not select: the fd numbers come from the host and may exceed FD_SETSIZE.
            self._poller = select.poll()
            for fd in fds:
                self._poller.register(fd, select.POLLIN)
        self._track = True

    def watch(self, pid: int) -> None:
        """Ask for a wake-up when ``pid`` forks or exits (kqueue only)."""
        kq = self._kq
        if kq is None:
            return
        base = _kq.KQ_NOTE_EXIT | _kq.KQ_NOTE_FORK
        track = getattr(_kq, "KQ_NOTE_TRACK", 0)
        for fflags in (base | track, base) if self._track and track else (base,):
            event = _kq.kevent(
                pid,
                filter=_kq.KQ_FILTER_PROC,
                flags=_kq.KQ_EV_ADD,
                fflags=fflags,
            )
            try:
                kq.control([event], 0, 0)
                return
            except OSError:
                if fflags != base:
                    self._track = False  # e.g. macOS: NOTE_TRACK is not supported
                continue

    def forget(self, fd: int) -> None:
        """Stop waiting on ``fd``."""
        if self._poller is not None:
            self._poller.unregister(fd)
            return
        event = _kq.kevent(fd, filter=_kq.KQ_FILTER_READ, flags=_kq.KQ_EV_DELETE)
        try:
            if self._kq is not None:
                self._kq.control([event], 0, 0)
        except OSError:
            pass

    def wait(self, timeout: float) -> tuple[set[int], list[int]]:
        """Return the ready fds and the pids kqueue reported as new children."""
        if self._kq is None:
            assert self._poller is not None
            return {fd for fd, _ in self._poller.poll(max(timeout, 0.0) * 1000)}, []
        ready: set[int] = set()
        born: list[int] = []
        child = getattr(_kq, "KQ_NOTE_CHILD", 0)
        try:
            events = self._kq.control(None, 64, max(timeout, 0.0))
        except InterruptedError:
            return ready, born
        for event in events:
            if event.filter == _kq.KQ_FILTER_READ:
                ready.add(event.ident)
            elif child and event.fflags & child:
                born.append(event.ident)
        return ready, born


def _reap(product: int, status_fd: int) -> int | None:
    try:
        pid, status = os.waitpid(product, os.WNOHANG)
    except ChildProcessError:
        return 0
    if pid == 0:
        return None
    if os.WIFEXITED(status):
        _write(status_fd, f"X {os.WEXITSTATUS(status)}\n")
    else:
        _write(status_fd, f"S {os.WTERMSIG(status)}\n")
    return status


def _mirror(status: int) -> None:  # never returns
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    signum = os.WTERMSIG(status)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signum, signal.SIG_DFL)
    except (OSError, ValueError, ImportError):
        pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def _start_product(program: list[str], status_fd: int, policy: tuple[object, ...] | None) -> int:
    """Fork and exec the product; report ``P``; on exec failure report ``E`` and exit."""
    if policy is not None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import _landlock  # type: ignore[import-not-found,unused-ignore]

        _landlock.abi()  # loads libc before the fork
    landlock = sys.modules.get("_landlock") if policy is not None else None
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(err_r)
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            if policy is not None:
                try:
                    if landlock is None:
                        raise OSError(0, "the confinement module is not loaded")  # fail closed
                    landlock.apply(policy)
                except Exception as exc:  # the product must not run unconfined
                    _write(err_w, "L" + str(getattr(exc, "errno", 0) or 0))
                    os._exit(_EXEC_FAILED)
            os.execvp(program[0], program)
        except OSError as exc:
            _write(err_w, str(exc.errno or 0))
        finally:
            os._exit(_EXEC_FAILED)
    os.close(err_w)
    report = b""
    while chunk := os.read(err_r, 64):
        report += chunk
    os.close(err_r)
    if report:
        kind = "L " if report.startswith(b"L") else "E "
        _write(status_fd, kind + report.lstrip(b"L").decode("ascii", "replace") + "\n")
        os.waitpid(pid, 0)
        os._exit(_EXEC_FAILED)
    _write(status_fd, f"P {pid}\n")
    return pid


def _drain(fd: int) -> bytes:
    seen = b""
    try:
        while chunk := os.read(fd, 512):
            seen += chunk
    except BlockingIOError:
        pass
    return seen


def main(argv: list[str]) -> None:
    status_fd, lifeline_fd = int(argv[1]), int(argv[2])
    if argv[3] == "-":  # see _guard.main: undo Python's LC_CTYPE coercion
        os.environ.pop("LC_CTYPE", None)
    else:
        os.environ["LC_CTYPE"] = argv[3][1:]
    grace = float(argv[4])
    # psutil before the product starts, though its import is most of this guard's
    # start-up: a product forking during that import would have a window of tens of ms
    # (hundreds under load) in which a double fork escapes unseen.
    sys.path.insert(0, argv[5])
    import psutil

    os.set_inheritable(status_fd, False)
    os.set_inheritable(lifeline_fd, False)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _ignore)  # a handler, so SIGCHLD reaches the wakeup fd
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)
    policy = None if argv[6] == "-" else marshal.loads(bytes.fromhex(argv[6]))
    product = _start_product(argv[7:], status_fd, policy)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)

    waiter = _Waiter((lifeline_fd, wake_r))
    tree = _Tree(psutil, product)
    waiter.watch(product)
    product_status: int | None = None
    lifeline_open = True
    kill_at: float | None = None  # when the members still alive get SIGKILL
    interval = _SCAN_FAST_SECONDS
    while True:
        if product_status is None:
            product_status = _reap(product, status_fd)
        found = tree.scan()
        for pid in found:
            waiter.watch(pid)
        if tree.terminating:
            tree.signal_outside_group(found)
        if kill_at is not None and time.monotonic() >= kill_at:
            tree.kill_all()
        if product_status is not None and not tree.live():
            _mirror(product_status)
        interval = _SCAN_FAST_SECONDS if found else min(interval * 2, _SCAN_SLOW_SECONDS)
        if kill_at is not None:
            interval = min(interval, _KILL_POLL_SECONDS)
        ready, born = waiter.wait(interval)
        for pid in born:
            if tree._add(pid):
                waiter.watch(pid)
        if born:
            interval = _SCAN_FAST_SECONDS
        if wake_r in ready and signal.SIGTERM in _drain(wake_r) and not tree.terminating:
            # The host's request: look once more before anyone dies and is re-parented.
            for pid in tree.scan():
                waiter.watch(pid)
            tree.terminating = True
            tree.term_all()
        if lifeline_open and lifeline_fd in ready:
            try:
                data = os.read(lifeline_fd, 512)
            except OSError:
                data = b""
            if b"K" in data:  # the host's escalation or exit: kill now
                tree.terminating = True
                kill_at = time.monotonic()
            elif not data:  # the host died: ask first, then kill
                lifeline_open = False
                if kill_at is None:
                    for pid in tree.scan():
                        waiter.watch(pid)
                    tree.terminating = True
                    tree.term_all()
                    kill_at = time.monotonic() + min(grace, _HOST_DEATH_GRACE_CAP)
            if not lifeline_open:
                waiter.forget(lifeline_fd)  # it would report EOF forever


if __name__ == "__main__":
    main(sys.argv)
