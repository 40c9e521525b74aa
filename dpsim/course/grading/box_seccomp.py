"""The box's seccomp filter: the system calls a notebook never needs, refused by the kernel.

bubblewrap loads a filter given as compiled classic BPF (`bwrap --seccomp FD`); this module
writes that program, in Python, from a short list. What it refuses (EPERM), after the box
is built:

- new namespaces of any kind: `unshare`, `setns`, and `clone` with a CLONE_NEW* flag
  (`clone3`, whose flags the filter cannot read, answers ENOSYS, so the C library falls
  back to `clone`, which it can);
- what reads or writes another process: `ptrace`, `process_vm_readv/writev`, `kcmp`;
- the kernel's less-travelled surfaces: `bpf`, `perf_event_open`, `userfaultfd`,
  `io_uring_*`, the key ring (`add_key`, `request_key`, `keyctl`), file handles
  (`name_to_handle_at`, `open_by_handle_at`), `lookup_dcookie`;
- what an unprivileged user cannot do anyway, refused before the kernel looks further:
  mounts (old and new API), `pivot_root`, `chroot`, modules, `kexec_*`, `reboot`, swap,
  `acct`, quotas, clocks, `syslog`, `iopl/ioperm`, `vhangup`.

Everything else is allowed. The numbers are x86-64's (`asm/unistd_64.h`); on another
architecture no filter is made and `hardening()` says so. A call of another ABI is refused
(x32: EPERM) or ends its process (i386 on an x86-64 kernel).
"""

from __future__ import annotations

import errno
import platform
import struct

# classic BPF opcodes (linux/filter.h) and seccomp's return values (linux/seccomp.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO | errno
_KILL_PROCESS = 0x80000000  # SECCOMP_RET_KILL_PROCESS
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16  # struct seccomp_data (little-endian)

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
CLONE_NEW_FLAGS = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                   | 0x20000000 | 0x40000000 | 0x00000080)  # NS CGROUP UTS IPC USER PID NET TIME

X86_64_CLONE, X86_64_CLONE3 = 56, 435
X86_64_REFUSED: dict[str, int] = {
    "ptrace": 101, "syslog": 103, "vhangup": 153, "pivot_root": 155, "adjtimex": 159,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166,
    "swapon": 167, "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212,
    "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
    "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    """One `struct sock_filter` (8 bytes, native byte order)."""
    return struct.pack("=HBBI", code, jt, jf, k)


def supported() -> bool:
    """Whether a filter is made for this machine's architecture."""
    return platform.machine() in ("x86_64", "AMD64")


def program() -> bytes:
    """The compiled filter for x86-64, as bubblewrap reads it from `--seccomp FD`."""
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    refused = sorted(X86_64_REFUSED.values())
    ops = [_op(_LD_W_ABS, _OFFSET_ARCH),
           _op(_JEQ_K, AUDIT_ARCH_X86_64, jt=1),  # the right ABI: go on
           _op(_RET_K, _KILL_PROCESS),  # i386 calls on an x86-64 kernel
           _op(_LD_W_ABS, _OFFSET_NR),
           _op(_JGE_K, X32_SYSCALL_BIT, jf=1),  # an x32 call: refused
           _op(_RET_K, eperm)]
    # each refused number jumps to the EPERM at the end of the list
    for i, nr in enumerate(refused):
        ops.append(_op(_JEQ_K, nr, jt=len(refused) - i + 5))
    ops += [_op(_JEQ_K, X86_64_CLONE3, jt=3),  # -> ENOSYS
            _op(_JEQ_K, X86_64_CLONE, jf=3),  # not clone -> allow
            _op(_LD_W_ABS, _OFFSET_ARG0),  # clone's flags (their low 32 bits)
            _op(_JSET_K, CLONE_NEW_FLAGS, jt=2, jf=1),  # a new namespace -> EPERM
            _op(_RET_K, enosys),
            _op(_RET_K, _ALLOW),
            _op(_RET_K, eperm)]
    return b"".join(ops)
