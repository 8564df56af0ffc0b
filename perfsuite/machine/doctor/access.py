"""Can this process use the GPU: device nodes present and openable, the groups that own them, container flags."""

from __future__ import annotations

import os
from typing import Any

from perfsuite.machine.doctor.host import Host

CONTAINER_FLAGS_AMD = ("--device=/dev/kfd --device=/dev/dri --group-add video --group-add render "
                       "--security-opt seccomp=unconfined")
CONTAINER_FLAGS_NVIDIA = "--gpus all (with the NVIDIA Container Toolkit)"


def in_container(host: Host) -> str | None:
    """"docker" / "podman" / "kubernetes" / "container", or None on bare metal."""
    if host.exists("/.dockerenv"):
        return "docker"
    if host.exists("/run/.containerenv"):
        return "podman"
    if host.env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    cgroup = host.read_text("/proc/1/cgroup") or ""
    return "container" if any(w in cgroup for w in ("docker", "kubepods", "libpod", "containerd", "lxc")) else None


def _group(path: str) -> str | None:
    try:
        import grp

        return grp.getgrgid(os.stat(path).st_gid).gr_name
    except (ImportError, KeyError, OSError):
        return None


def node(host: Host, path: str) -> dict[str, Any]:
    present = host.exists(path)
    return {"path": path, "present": present,
            "openable": bool(present and host.access(path, os.R_OK | os.W_OK)),
            "group": _group(path) if present else None}


def check(host: Host) -> dict[str, Any]:
    render = host.glob("/dev/dri/renderD*")
    return {"container": in_container(host),
            "kfd": node(host, "/dev/kfd"),
            "render_nodes": [node(host, p) for p in render],
            "nvidia": [node(host, p) for p in ("/dev/nvidiactl", *host.glob("/dev/nvidia[0-9]*"))]}
