"""Host-death guard (Linux): one guard per product, started alone or by a per-host server.

It imports only the standard library and runs as ``python -I -S _guard.py`` in one of
two modes.

Per-spawn mode, ``_guard.py STATUS_FD LIFELINE_FD LC_CTYPE POLICY PROGRAM [ARG...]``:
the host starts it in a new session with the product's stdio, cwd and environment, and
it guards that one product. ``POLICY`` is ``-`` or the product's confinement (see
below) as one word.

Server mode, ``_guard.py serve SOCKET_FD LIFELINE_FD``: the host starts it once (in a
new session) and sends one request per product over a ``SOCK_SEQPACKET`` socket: a
``marshal``-ed ``(argv, cwd, env, policy)`` (bytes; the policy ``None`` or a tuple),
with the product's stdin, stdout and stderr and the status pipe's write end attached by
``SCM_RIGHTS``. The server is single-threaded (so ``fork`` is safe), marks itself a
child subreaper, forks one guard child per request and reaps it. The guard child calls
``setsid`` (each product tree has its own session and process group, led by its guard,
as in per-spawn mode) and runs the same guard logic. Should a guard child be killed
while descendants of its product live, those orphans are re-parented to the server,
which SIGKILLs them at once: a tree is only ever attributed to its own guard. When the
lifeline or the socket reaches EOF (the host died or shut the server down) the server
SIGKILLs every descendant and exits; each guard child also watches a pipe whose only
writer is the server, so a killed server takes every tree with it.

A guard

* marks itself a child subreaper, so every orphaned descendant of the product (also one
  that called ``setsid`` or double-forked) is re-parented to it instead of to init;
* forks and execs the product in its own session and process group, with stdio
  inherited directly and ``PR_SET_PDEATHSIG(SIGKILL)`` so the product dies if the guard
  itself is killed;
* confines the product when the host asked for it: the forked child applies the
  Landlock policy to itself (``_landlock.py``, loaded from this file's directory) right
  before ``exec``, so the product and all it starts are confined while the guard, which
  must walk ``/proc`` and signal the tree, is not; if the kernel refuses, the product is
  not started and ``L <errno>`` is reported;
* keeps its own fds 0/1/2 on /dev/null so it never delays the product's stdout EOF;
* reports on the status pipe ``G <pid>`` (its own pid; server mode only), then
  ``P <pid>`` (started), ``E <errno>`` (exec failed) or ``L <errno>`` (confinement
  refused), then ``X <code>`` or ``S <signum>`` as soon as the product exits;
* reaps every child and exits only when none is left;
* when it receives SIGTERM (the host's group SIGTERM reaches it as the group's leader),
  passes it on to every descendant outside its process group, found through
  ``/proc/<pid>/task/<tid>/children`` (a full /proc walk where the kernel lacks those):
  those that called ``setsid`` or double-forked are asked to stop too, not only killed
  after the grace;
* when a watched pipe (the host's lifeline, in server mode also the server's) reaches
  EOF, SIGKILLs every descendant, found by walking /proc, and exits.

A guard does not die of SIGTERM/SIGINT/SIGHUP, so a group SIGTERM reaches the product
(and, relayed, the escapees) while the guard keeps reaping; the host's escalation
SIGKILLs it with the rest of the group.
"""

# _signal, not signal: the latter imports enum, a few ms of start-up for every product.
import _signal as signal  # type: ignore[import-not-found]
import _socket
import ctypes
import marshal
import os
import select
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_EXEC_FAILED = 127
_MAX_REQUEST_BYTES = 1 << 18  # the host sends at most 200 000 bytes
_REQUEST_FDS = 4  # stdin, stdout, stderr, status
_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_landlock() -> None:
    """Import ``_landlock.py`` from this directory (``-I`` keeps it off ``sys.path``).

    Done before forking a product, so the child finds it in ``sys.modules``.
    """
    if "_landlock" not in sys.modules:
        sys.path.insert(0, _HERE)
        try:
            import _landlock  # type: ignore[import-not-found,unused-ignore]
        finally:
            del sys.path[0]
        _landlock.abi()  # loads libc once, here rather than in every product's child


def _ignore(signum: int, frame: object) -> None:
    pass


def _write(fd: int, text: str) -> None:
    try:  # noqa: SIM105 - contextlib costs start-up time
        os.write(fd, text.encode("ascii"))
    except OSError:
        pass  # the host is gone: the lifeline will say so


def _close(*fds: int) -> None:
    for fd in fds:
        try:  # noqa: SIM105 - contextlib costs start-up time
            os.close(fd)
        except OSError:
            pass


def _children_map() -> dict[int, list[int]]:
    """Every live process (zombies left out), listed under its parent's pid."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as stat:
                data = stat.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) < 2 or fields[0] in (b"Z", b"X", b"x"):
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    return children


def _below(children: dict[int, list[int]], roots: list[int]) -> list[int]:
    found: list[int] = []
    frontier = list(roots)
    while frontier:
        for pid in children.get(frontier.pop(), ()):
            found.append(pid)
            frontier.append(pid)
    return found


def _descendants(root: int) -> list[int]:
    return _below(_children_map(), [root])


def _reap_all() -> tuple[list[tuple[int, int]], bool]:
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped, True
        if pid == 0:
            return reaped, False
        reaped.append((pid, status))


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:  # noqa: SIM105 - contextlib costs start-up time
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _subtree(root: int) -> list[int] | None:
    """``root``'s descendants from ``/proc/<pid>/task/<tid>/children``, or ``None``.

    Reads only the tree's own entries (a full ``/proc`` scan costs milliseconds on a busy
    host). ``None`` when the kernel has no such files. A child that starts or exits
    during the walk may be missed: good enough for a request to stop, never for a kill.
    """
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return None  # a kernel without CONFIG_PROC_CHILDREN
    found: list[int] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        for tid in tids:  # a child is listed under the thread that forked it
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as listing:
                    kids = [int(kid) for kid in listing.read().split()]
            except (OSError, ValueError):
                continue  # the thread or process is gone meanwhile
            found += kids
            frontier += kids
    return found


def _relay_term(asked: set[int]) -> None:
    """Pass a SIGTERM on to every descendant outside the guard's own process group.

    The host ends a tree with one SIGTERM to the guard's group. A descendant that called
    ``setsid`` (or double-forked into a group of its own) is not in that group, but, the
    guard being the tree's subreaper, it is still the guard's descendant: it is asked to
    stop now rather than only killed after the grace. Pids in ``asked`` were asked by an
    earlier walk and are skipped (one SIGTERM each); the new ones are added.
    """
    me = os.getpid()
    group = os.getpgrp()
    below = _subtree(me)
    if below is None:
        below = _below(_children_map(), [me])
    for pid in below:
        if pid in asked:
            continue
        try:
            if os.getpgid(pid) != group:
                os.kill(pid, signal.SIGTERM)
                asked.add(pid)
        except OSError:
            pass  # gone meanwhile


def _kill_everything() -> None:
    me = os.getpid()
    for _ in range(200):
        targets = _descendants(me)
        if not targets:
            return
        _kill_all(targets)
        _reap_all()
        select.poll().poll(5)


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


class _Product:
    """What to exec, and, in server mode, where and with which environment and stdio."""

    def __init__(
        self,
        program: list[bytes] | list[str],
        env: dict[bytes, bytes] | None = None,
        cwd: bytes | None = None,
        stdio: tuple[int, int, int] | None = None,
        policy: tuple[object, ...] | None = None,
    ) -> None:
        self.program = program
        self.env = env
        self.cwd = cwd
        self.stdio = stdio
        self.policy = policy


def _exec_product(
    product: _Product, err_w: int, guard_pid: int, libc: ctypes.CDLL
) -> None:  # never returns
    try:
        if product.stdio is not None:
            for target, fd in enumerate(product.stdio):
                os.dup2(fd, target)
        if product.cwd is not None:
            os.chdir(product.cwd)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != guard_pid:
            os._exit(_EXEC_FAILED)
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        if product.policy is not None:
            try:
                landlock = sys.modules.get("_landlock")
                if landlock is None:
                    raise OSError(0, "the confinement module is not loaded")  # fail closed
                landlock.apply(product.policy)
            except Exception as exc:  # whatever it was, the product must not run
                _write(err_w, "L" + str(getattr(exc, "errno", 0) or 0))
                os._exit(_EXEC_FAILED)
        program = product.program
        if product.env is None:
            os.execvp(program[0], program)
        else:
            os.execvpe(program[0], program, product.env)
    except OSError as exc:
        _write(err_w, str(exc.errno or 0))
    finally:
        os._exit(_EXEC_FAILED)


def _start_product(product: _Product, status_fd: int, libc: ctypes.CDLL) -> int:
    """Fork and exec the product; report ``P``; on exec failure report ``E`` and exit."""
    if product.policy is not None:
        _load_landlock()
    err_r, err_w = os.pipe()
    guard_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(err_r)
        _exec_product(product, err_w, guard_pid, libc)
    os.close(err_w)
    report = b""
    while True:
        chunk = os.read(err_r, 64)
        if not chunk:
            break
        report += chunk
    os.close(err_r)
    if report:
        kind = "L " if report.startswith(b"L") else "E "
        _write(status_fd, kind + report.lstrip(b"L").decode("ascii", "replace") + "\n")
        os.waitpid(pid, 0)
        os._exit(_EXEC_FAILED)
    _write(status_fd, f"P {pid}\n")
    return pid


def _wakeup_pipe() -> int:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _ignore)  # a handler, so SIGCHLD reaches the wakeup fd
    return wake_r


def _drain(fd: int) -> bytes:
    """Empty the signal wakeup pipe; return what it held (one byte per signal number)."""
    seen = b""
    try:
        while chunk := os.read(fd, 512):
            seen += chunk
    except BlockingIOError:
        pass
    return seen


def _watch(product: int, status_fd: int, watched: tuple[int, ...], wake_r: int) -> int:
    """Reap and report until no child is left; return the product's wait status."""
    # poll, not select: the fd numbers come from the host and may exceed FD_SETSIZE.
    poller = select.poll()
    for fd in (*watched, wake_r):
        poller.register(fd, select.POLLIN)
    product_status: int | None = None
    asked: set[int] | None = None  # once SIGTERM came: the descendants it was passed on to
    while True:
        reaped, none_left = _reap_all()
        for pid, status in reaped:
            if pid == product:
                product_status = status
                if os.WIFEXITED(status):
                    _write(status_fd, f"X {os.WEXITSTATUS(status)}\n")
                else:
                    _write(status_fd, f"S {os.WTERMSIG(status)}\n")
        if none_left:
            return product_status if product_status is not None else 0
        if asked is not None and reaped:
            # A process that died during the last walk left its children to this guard
            # (the subreaper) only then: look again, asking only those not asked yet.
            _relay_term(asked)
        ready = {fd for fd, _events in poller.poll()}
        if wake_r in ready and signal.SIGTERM in _drain(wake_r):
            asked = asked if asked is not None else set()
            _relay_term(asked)
        for fd in watched:
            if fd in ready and not os.read(fd, 512):
                _kill_everything()
                os._exit(_EXEC_FAILED)


def _become_guard(libc: ctypes.CDLL) -> None:
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)


def main(argv: list[str]) -> None:
    """Per-spawn mode: guard the product named on the command line."""
    status_fd = int(argv[1])
    lifeline_fd = int(argv[2])
    # Python's start-up may coerce a C locale by exporting LC_CTYPE; the product gets
    # the environment the host chose: "-" means unset, "=<value>" means that value.
    lc_ctype = argv[3]
    if lc_ctype == "-":
        os.environ.pop("LC_CTYPE", None)
    else:
        os.environ["LC_CTYPE"] = lc_ctype[1:]
    os.set_inheritable(status_fd, False)
    os.set_inheritable(lifeline_fd, False)
    policy = None if argv[4] == "-" else marshal.loads(bytes.fromhex(argv[4]))
    libc = ctypes.CDLL(None, use_errno=True)
    wake_r = _wakeup_pipe()
    _become_guard(libc)
    product = _start_product(_Product(argv[5:], policy=policy), status_fd, libc)

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    _mirror(_watch(product, status_fd, (lifeline_fd,), wake_r))


# -- server mode ----------------------------------------------------------------------


def _guard_child(
    request: bytes, fds: list[int], watched: tuple[int, int], libc: ctypes.CDLL
) -> None:  # never returns; runs in a child forked by the server
    stdin_fd, stdout_fd, stderr_fd, status_fd = fds
    os.setsid()
    wake_r = _wakeup_pipe()  # before the host can know this pid: no SIGTERM goes unseen
    _become_guard(libc)
    _write(status_fd, f"G {os.getpid()}\n")
    argv, cwd, env, policy = marshal.loads(request)
    stdio = (stdin_fd, stdout_fd, stderr_fd)
    product = _start_product(_Product(list(argv), dict(env), cwd, stdio, policy), status_fd, libc)
    _close(stdin_fd, stdout_fd, stderr_fd)
    _watch(product, status_fd, watched, wake_r)
    os._exit(0)


def _receive(sock: _socket.socket) -> tuple[bytes, list[int], bool]:
    """One request: its bytes, its fds, and whether it arrived whole."""
    data, ancdata, flags, _address = sock.recvmsg(
        _MAX_REQUEST_BYTES, _socket.CMSG_SPACE(_REQUEST_FDS * 4), _socket.MSG_CMSG_CLOEXEC
    )
    fds: list[int] = []
    for level, kind, cdata in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(cdata) - len(cdata) % 4
            fds += [int.from_bytes(cdata[i : i + 4], sys.byteorder) for i in range(0, usable, 4)]
    whole = not flags & (_socket.MSG_TRUNC | _socket.MSG_CTRUNC) and len(fds) == _REQUEST_FDS
    return data, fds, whole


def _kill_orphans(guards: set[int]) -> None:
    """SIGKILL every child of the server that is not a guard, and all below it."""
    me = os.getpid()
    for _ in range(200):
        children = _children_map()
        strays = [pid for pid in children.get(me, ()) if pid not in guards]
        if not strays:
            return
        _kill_all(strays + _below(children, strays))
        select.poll().poll(5)


def serve(argv: list[str]) -> None:
    """Server mode: fork one guard child per request until the host goes away."""
    sock_fd = int(argv[2])
    lifeline_fd = int(argv[3])
    os.set_inheritable(sock_fd, False)
    os.set_inheritable(lifeline_fd, False)
    sock = _socket.socket(fileno=sock_fd)
    sock.setblocking(True)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _load_landlock()  # once here, inherited by every guard child it forks
    wake_r = _wakeup_pipe()
    # Guard children watch death_r: its only writer is this process, so EOF there means
    # the server is gone and each guard must take its tree down.
    death_r, death_w = os.pipe()
    poller = select.poll()
    for fd in (sock_fd, lifeline_fd, wake_r):
        poller.register(fd, select.POLLIN)
    guards: set[int] = set()
    while True:
        reaped, _none_left = _reap_all()
        orphans_possible = False
        for pid, status in reaped:
            if pid in guards:
                guards.discard(pid)
                # A guard exits by itself only once its tree is empty; a killed one may
                # leave descendants, now re-parented here.
                orphans_possible = orphans_possible or not os.WIFEXITED(status)
        if orphans_possible:
            _kill_orphans(guards)
        ready = {fd for fd, _events in poller.poll()}
        if wake_r in ready:
            _drain(wake_r)
        if lifeline_fd in ready and not os.read(lifeline_fd, 512):
            _kill_everything()
            os._exit(0)
        if sock_fd not in ready:
            continue
        try:
            data, fds, whole = _receive(sock)
        except InterruptedError:
            continue
        except OSError:
            data, fds, whole = b"", [], False
        if not data and not fds:  # the host shut the server down (or died)
            _kill_everything()
            os._exit(0)
        if not whole:
            if len(fds) == _REQUEST_FDS:
                _write(fds[3], "E 7\n")  # E2BIG: the host never sends more than fits
            _close(*fds)
            continue
        try:
            pid = os.fork()
        except OSError as exc:
            _write(fds[3], f"E {exc.errno or 0}\n")
            _close(*fds)
            continue
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                _close(sock_fd, death_w, wake_r)
                _guard_child(data, fds, (lifeline_fd, death_r), libc)
            finally:
                os._exit(_EXEC_FAILED)
        guards.add(pid)
        _close(*fds)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv)
    else:
        main(sys.argv)
