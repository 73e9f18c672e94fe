"""Builds one of the repository's Maven projects with scripts/maven-build.sh, telling a build
that cannot run here (no Maven, no Java 17, artifacts that cannot be downloaded: a reason to
skip) from one that fails (a compile error: a failure)."""

import os
import subprocess

from conftest import REPO

SCRIPT = os.path.join(REPO, "scripts", "maven-build.sh")
# What a Maven log says when an artifact cannot be had (no network, not in the local repository).
UNRESOLVABLE = ("Could not resolve dependencies", "Could not transfer artifact",
                "Cannot access", "in offline mode", "Could not resolve plugin",
                "Plugin org.apache.maven.plugins", "Non-resolvable")


class BuildUnavailable(Exception):
    """Maven or Java is missing, or Maven cannot download what the project needs."""


def build(project, name, timeout=1200):
    """Builds `project` (a directory under REPO) into target/<name>.jar and target/lib (a no-op
    when up to date). Raises BuildUnavailable when it cannot be built for want of Maven, Java or
    the artifacts; RuntimeError for any other failure."""
    project = os.path.join(REPO, project)
    done = subprocess.run([SCRIPT, project, name], capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode == 0:
        return
    if done.returncode == 3:  # the script's code for a missing mvn or java
        raise BuildUnavailable(done.stderr.strip())
    log = ""
    log_path = os.path.join(project, "target", "build.log")
    if os.path.exists(log_path):
        with open(log_path, encoding="utf-8", errors="replace") as f:
            log = f.read()
    found = [marker for marker in UNRESOLVABLE if marker in log]
    if found:
        lines = [line for line in log.splitlines() if any(m in line for m in found)]
        raise BuildUnavailable(f"Maven cannot download {name}'s dependencies: "
                               + " | ".join(lines[:3]))
    raise RuntimeError(f"{SCRIPT} {project} {name} failed ({done.returncode}):\n"
                       f"{done.stderr[-4000:]}")


def classpath(project, name):
    """The run class path of a built project."""
    target = os.path.join(REPO, project, "target")
    return f"{target}/{name}.jar:{target}/lib/*"
