"""The grader's stand-in for one forked kernel: the process nbgrader's kernel manager starts,
watches and kills, as it would a kernel (graders/sandbox/zygote.py says why and how).

Run as ``python -I -S zygote_stub.py SOCKET PRIVATE REQUEST`` (standard library only): it
turns the kernel's folders into detached mounts (the private runtime folder, and each of the
lab's files and matplotlib's font list read-only), opens the kernel's cgroups for joining,
hands all of it to the warm process over SOCKET (grading_zygote.py, beside it), then drops
to the warm process's own unprivileged host user (the request's ``stub_uid``), with no
capability and no new privileges, and waits: the host's root is needed only to make those
mounts and open those groups, before the hand-off. It ends with the kernel's exit status when
the kernel ends; when it is killed, the kernel is killed (the warm process sees the
connection close). PRIVATE is also an argument of its own
so that graders/sandbox/sandbox_host.py finds it by its command line, as it finds bubblewrap's.
"""

import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves its folder out
from grading_zygote import _drop_privileges, detached  # noqa: E402 - stdlib only


def main(socket_path: str, private: str, given: str) -> int:
    request = json.loads(given)
    unprivileged = request.pop("stub_uid")
    fds = [detached(private, readonly=False, noexec=True)]
    request["private"], request["private_fd"] = private, 0
    files = []
    for target, path in request.pop("file_paths"):  # target: relative to the working folder
        files.append([target, len(fds)])
        fds.append(detached(path, readonly=True))
    request["files"] = files
    groups = []
    for folder in request.pop("group_paths"):
        groups.append(len(fds))
        fds.append(os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
    request["groups"] = groups
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(socket_path)
        socket.send_fds(conn, [json.dumps(request).encode()], fds)
        for fd in fds:
            os.close(fd)
        _drop_privileges(unprivileged)  # nothing of the host's root is needed from here on
        said = b""
        while chunk := conn.recv(64):
            said += chunk
    try:
        code = int(said)
    except ValueError:  # the warm process ended first
        return 1
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
