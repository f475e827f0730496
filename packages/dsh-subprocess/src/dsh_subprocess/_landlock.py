"""Landlock, the Linux kernel's unprivileged confinement, in the standard library only.

This module is imported by the host (as ``dsh_subprocess._landlock``) and by the
host-death guards, which run as ``python -I -S`` and import nothing outside the standard
library (they load this file by path, as ``_landlock``): so the syscalls are made through
``ctypes`` here, not through a PyPI binding, which the guards could not import.

Three parts:

* :func:`abi`: the Landlock ABI version the running kernel offers, 0 when it offers none
  (not Linux, an architecture whose syscall numbers are not listed here, a kernel older
  than 5.13, Landlock left out of the boot's LSM list, or a seccomp filter answering
  ENOSYS).
* The access rights, and which of them each ABI knows (:func:`handled_fs`,
  :func:`handled_net`, :func:`scoped`). A ruleset must not name a right its kernel does
  not know.
* :func:`apply`: build a ruleset from a policy (the plain, ``marshal``-able tuple the host
  computes, see :data:`Policy`) and restrict the calling process with it. It runs in the
  product's process right before ``exec``, so the guard that forked it stays unconfined
  (it must walk ``/proc`` and signal the tree) while the product and everything it
  starts are confined.

Run as a script (``python -I -S _landlock.py ERR_FD LC_CTYPE POLICY PROGRAM [ARG...]``)
it is the exec trampoline of an unguarded confined spawn: it applies ``POLICY`` (hex of
the ``marshal``-ed tuple) to itself and execs the program, reporting ``L <errno>``
(confinement failed) or ``E <errno>`` (exec failed) on ``ERR_FD``, whose close-on-exec
end tells the host that the exec happened.
"""

import ctypes
import marshal
import os
import sys

# os.execvp imports warnings on first use (os.get_exec_path): by then the ruleset may
# forbid reading the standard library, so it is imported here, before any restriction.
import warnings  # noqa: F401

# Access rights (include/uapi/linux/landlock.h).
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

FS_NAMES = {
    FS_EXECUTE: "execute",
    FS_WRITE_FILE: "write_file",
    FS_READ_FILE: "read_file",
    FS_READ_DIR: "read_dir",
    FS_REMOVE_DIR: "remove_dir",
    FS_REMOVE_FILE: "remove_file",
    FS_MAKE_CHAR: "make_char",
    FS_MAKE_DIR: "make_dir",
    FS_MAKE_REG: "make_reg",
    FS_MAKE_SOCK: "make_sock",
    FS_MAKE_FIFO: "make_fifo",
    FS_MAKE_BLOCK: "make_block",
    FS_MAKE_SYM: "make_sym",
    FS_REFER: "refer",
    FS_TRUNCATE: "truncate",
    FS_IOCTL_DEV: "ioctl_dev",
}

# The rights a rule on a regular file (not a directory) may carry; any other is EINVAL.
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# Writing beneath a directory: everything but creating device nodes (root could otherwise
# mknod a disk inside the cwd and read it raw). REFER lets git link or rename an object
# from one directory to another; the kernel still refuses a link that would give a file
# more rights than it had where it came from.
WRITE = (
    READ
    | FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE
)
DEVICE_RW = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
DEVICE_DIR_RW = DEVICE_RW | FS_READ_DIR
DEVICE_READ = FS_READ_FILE

_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
# With either capability a process may still read another's /proc/<pid>/environ and maps
# across its Landlock domain (verified on 6.18 as root); see apply().
_CAP_SYS_ADMIN = 21
_CAP_PERFMON = 38

# Since Linux 5.1 a new syscall has one number on every architecture but alpha, ia64 and
# mips: landlock_create_ruleset, landlock_add_rule, landlock_restrict_self. Verified on
# x86_64; the others are listed from the kernel's generic syscall table.
_SYSCALLS = (444, 445, 446)
_MACHINES = frozenset(
    {
        "x86_64",
        "amd64",
        "i386",
        "i686",
        "aarch64",
        "arm64",
        "armv7l",
        "armv8l",
        "riscv64",
        "ppc64le",
        "ppc64",
        "s390x",
        "loongarch64",
    }
)

# (handled_fs, handled_net, scoped, [(path, access)], [(port, access)]); builtin generics,
# so no typing import at run time.
Policy = tuple[int, int, int, list[tuple[bytes, int]], list[tuple[int, int]]]
"""What :func:`apply` takes: plain values only, so it passes through ``marshal`` and argv.

``handled_fs``, ``handled_net`` and ``scoped`` are the ruleset's masks; each path rule is
``(path_bytes, access)`` (the access is masked to :data:`FILE_RIGHTS` when the path turns
out to be a file; a path that cannot be opened is skipped); each port rule is
``(port, access)``.
"""


_libc_handle: list[ctypes.CDLL] = []  # loaded once (0.2 ms): before a guard forks


def _libc() -> ctypes.CDLL:
    if not _libc_handle:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        _libc_handle.append(libc)
    return _libc_handle[0]


def _syscall(libc: ctypes.CDLL, number: int, *args: object) -> int:
    result = int(libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def _supported_machine() -> bool:
    if sys.platform != "linux" or os.uname().machine not in _MACHINES:
        return False
    # x32 (an x86_64 kernel, a 32-bit process) numbers its syscalls differently.
    return not (os.uname().machine == "x86_64" and sys.maxsize < 1 << 32)


def abi() -> int:
    """The Landlock ABI version of the running kernel, or 0 when it offers none."""
    if not _supported_machine():
        return 0
    try:
        libc = _libc()
        version = _syscall(
            libc,
            _SYSCALLS[0],
            ctypes.c_void_p(None),
            ctypes.c_size_t(0),
            ctypes.c_uint32(_CREATE_RULESET_VERSION),
        )
    except (OSError, AttributeError):
        return 0  # ENOSYS, EOPNOTSUPP (disabled at boot), or no libc syscall()
    return version


def handled_fs(version: int) -> int:
    """Every filesystem right ABI ``version`` knows (all of them handled: denied unless granted)."""
    if version < 1:
        return 0
    mask = (1 << 13) - 1
    if version >= 2:
        mask |= FS_REFER
    if version >= 3:
        mask |= FS_TRUNCATE
    if version >= 5:
        mask |= FS_IOCTL_DEV
    return mask


def handled_net(version: int) -> int:
    """The TCP rights ABI ``version`` knows: bind and connect from ABI 4, else none."""
    return NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0


def scoped(version: int) -> int:
    """The IPC scopes ABI ``version`` knows: abstract unix sockets and signals from ABI 6."""
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0


def _ruleset_attr(handled_fs_mask: int, handled_net_mask: int, scoped_mask: int) -> bytes:
    # struct landlock_ruleset_attr grew a field at ABI 4 and at ABI 6; a kernel rejects
    # trailing bytes it does not know unless they are zero, so send only what is used.
    fields = [handled_fs_mask]
    if handled_net_mask or scoped_mask:
        fields.append(handled_net_mask)
    if scoped_mask:
        fields.append(scoped_mask)
    return b"".join(value.to_bytes(8, sys.byteorder) for value in fields)


def apply(policy: Policy) -> None:
    """Restrict the calling process (and every process it starts) to ``policy``.

    Sets ``PR_SET_NO_NEW_PRIVS`` (required by ``landlock_restrict_self`` without
    ``CAP_SYS_ADMIN``; set-user-id programs then no longer gain privileges), which lasts
    for the process and its descendants. A process that may (root) also drops
    ``CAP_SYS_ADMIN`` and ``CAP_PERFMON`` from its bounding set, so the program it execs
    holds neither: with them, the kernel lets a confined process read the ``environ`` and
    ``maps`` of processes outside its domain (the host's environment holds its keys).

    Raises:
        OSError: The kernel refused the ruleset, a rule or the restriction; the process
            is then not restricted (a caller must not go on to run the product).
    """
    fs_mask, net_mask, scope_mask, path_rules, port_rules = policy
    libc = _libc()
    attr = _ruleset_attr(fs_mask, net_mask, scope_mask)
    ruleset = _syscall(
        libc, _SYSCALLS[0], ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)
    )
    try:
        for path, access in path_rules:
            _add_path_rule(libc, ruleset, path, access & fs_mask)
        for port, access in port_rules:
            rule = (access & net_mask).to_bytes(8, sys.byteorder) + port.to_bytes(8, sys.byteorder)
            _syscall(
                libc,
                _SYSCALLS[1],
                ctypes.c_int(ruleset),
                ctypes.c_int(_RULE_NET_PORT),
                ctypes.c_char_p(rule),
                ctypes.c_uint32(0),
            )
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        for capability in (_CAP_SYS_ADMIN, _CAP_PERFMON):
            # EPERM without CAP_SETPCAP (then it cannot hold them either), EINVAL on a
            # kernel older than CAP_PERFMON (5.8): nothing to drop.
            libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)
        _syscall(libc, _SYSCALLS[2], ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _add_path_rule(libc: ctypes.CDLL, ruleset: int, path: bytes, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # missing (or unreachable): nothing to grant; documented as skipped
    try:
        if not _is_dir(fd):
            access &= FILE_RIGHTS
        if not access:
            return
        rule = access.to_bytes(8, sys.byteorder) + fd.to_bytes(4, sys.byteorder, signed=True)
        _syscall(
            libc,
            _SYSCALLS[1],
            ctypes.c_int(ruleset),
            ctypes.c_int(_RULE_PATH_BENEATH),
            ctypes.c_char_p(rule),
            ctypes.c_uint32(0),
        )
    finally:
        os.close(fd)


def _is_dir(fd: int) -> bool:
    return (os.fstat(fd).st_mode & 0o170000) == 0o040000


def encode(policy: Policy) -> str:
    """``policy`` as one argv word (hex of its ``marshal`` form)."""
    return marshal.dumps(policy).hex()


def decode(word: str) -> Policy:
    """The inverse of :func:`encode`."""
    policy = marshal.loads(bytes.fromhex(word))
    if not isinstance(policy, tuple) or len(policy) != 5:
        raise ValueError("not a confinement policy")
    return policy


def _report(fd: int, text: str) -> None:
    try:  # noqa: SIM105 - contextlib costs start-up time
        os.write(fd, text.encode("ascii"))
    except OSError:
        pass


def _trampoline(argv: list[str]) -> None:  # never returns
    err_fd = int(argv[1])
    os.set_inheritable(err_fd, False)  # closed by the exec below: EOF tells the host
    if argv[2] == "-":  # see _guard.main: undo Python's LC_CTYPE coercion
        os.environ.pop("LC_CTYPE", None)
    else:
        os.environ["LC_CTYPE"] = argv[2][1:]
    try:
        apply(decode(argv[3]))
    except Exception as exc:  # whatever it was, the program must not run
        _report(err_fd, f"L {getattr(exc, 'errno', 0) or 0}\n")
        os._exit(127)
    program = argv[4:]
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        _report(err_fd, f"E {exc.errno or 0}\n")
    os._exit(127)


if __name__ == "__main__":
    _trampoline(sys.argv)
