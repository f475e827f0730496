"""Host-death guard: sits between the host and one product process (Linux).

Run by the host as ``python -I -S _guard.py STATUS_FD LIFELINE_FD LC_CTYPE PROGRAM [ARG...]`` in a
new session, with the product's stdio, cwd and environment. It imports only the
standard library. It

* marks itself a child subreaper, so every orphaned descendant of the product (also one
  that called ``setsid`` or double-forked) is re-parented to it instead of to init;
* forks and execs the product in its own session and process group, with stdio
  inherited directly and ``PR_SET_PDEATHSIG(SIGKILL)`` so the product dies if the guard
  itself is killed;
* points its own fds 0/1/2 at /dev/null so it never delays the product's stdout EOF;
* reports on STATUS_FD ``P <pid>`` (started), ``E <errno>`` (exec failed), then
  ``X <code>`` or ``S <signum>`` as soon as the product exits;
* reaps every child and exits only when none is left, mirroring the product's exit;
* when LIFELINE_FD reaches EOF (the host died, whatever the cause) SIGKILLs every
  descendant, found by walking /proc, and exits.

The guard ignores SIGTERM/SIGINT/SIGHUP so a group SIGTERM reaches the product while
the guard keeps reaping; the host's escalation SIGKILLs it with the rest of the group.
"""

# _signal, not signal: the latter imports enum, a few ms of start-up for every product.
import _signal as signal  # type: ignore[import-not-found]
import ctypes
import os
import select
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_EXEC_FAILED = 127


def _ignore(signum: int, frame: object) -> None:
    pass


def _write(fd: int, text: str) -> None:
    try:  # noqa: SIM105 - contextlib costs start-up time
        os.write(fd, text.encode("ascii"))
    except OSError:
        pass  # the host is gone: the lifeline will say so


def _descendants(root: int) -> list[int]:
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
    found: list[int] = []
    frontier = [root]
    while frontier:
        for pid in children.get(frontier.pop(), ()):
            found.append(pid)
            frontier.append(pid)
    return found


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


def _kill_everything() -> None:
    me = os.getpid()
    for _ in range(200):
        targets = _descendants(me)
        if not targets:
            return
        for pid in targets:
            try:  # noqa: SIM105 - contextlib costs start-up time
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
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


def _exec_product(
    program: list[str], err_w: int, guard_pid: int, libc: ctypes.CDLL
) -> None:  # never returns
    try:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != guard_pid:
            os._exit(_EXEC_FAILED)
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.execvp(program[0], program)
    except OSError as exc:
        _write(err_w, str(exc.errno or 0))
    finally:
        os._exit(_EXEC_FAILED)


def main(argv: list[str]) -> None:
    status_fd = int(argv[1])
    lifeline_fd = int(argv[2])
    # Python's start-up may coerce a C locale by exporting LC_CTYPE; the product gets
    # the environment the host chose: "-" means unset, "=<value>" means that value.
    lc_ctype = argv[3]
    if lc_ctype == "-":
        os.environ.pop("LC_CTYPE", None)
    else:
        os.environ["LC_CTYPE"] = lc_ctype[1:]
    program = argv[4:]
    os.set_inheritable(status_fd, False)
    os.set_inheritable(lifeline_fd, False)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _ignore)  # a handler, so SIGCHLD reaches the wakeup fd

    err_r, err_w = os.pipe()
    guard_pid = os.getpid()
    product = os.fork()
    if product == 0:
        os.close(err_r)
        _exec_product(program, err_w, guard_pid, libc)
    os.close(err_w)
    report = b""
    while True:
        chunk = os.read(err_r, 64)
        if not chunk:
            break
        report += chunk
    os.close(err_r)
    if report:
        _write(status_fd, "E " + report.decode("ascii", "replace") + "\n")
        os.waitpid(product, 0)
        os._exit(_EXEC_FAILED)
    _write(status_fd, f"P {product}\n")

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)

    # poll, not select: the fd numbers come from the host and may exceed FD_SETSIZE.
    poller = select.poll()
    poller.register(lifeline_fd, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    product_status: int | None = None
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
            _mirror(product_status if product_status is not None else 0)
        ready = {fd for fd, _events in poller.poll()}
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        if lifeline_fd in ready and not os.read(lifeline_fd, 512):
            _kill_everything()
            os._exit(_EXEC_FAILED)


if __name__ == "__main__":
    main(sys.argv)
