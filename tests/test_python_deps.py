"""``flowpoint run -pyfs/-pyreq/-pyarch/-pym`` end to end: a job whose map function needs a module
(or a data file) that exists only in what was shipped, run by the CLI in a subprocess from a
directory where it is not importable, on separate executor processes (local-cluster)."""

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MASTER = "local-cluster[2,1,1024]"

# the map function imports each module named on the command line, on the executor; the result
# says where each module was found, so the test sees it was Spark's shipped copy (several names:
# one run, one Spark start, checks several modules; and what it finds under -pyarch's alias)
JOB = textwrap.dedent(
    """
    import json
    import sys

    from flowpoint import StreamExecutionEnvironment


    def where(x, names=tuple(sys.argv[1:])):
        import importlib
        import os

        found = {}
        for name in names:
            m = importlib.import_module(name)
            found[name] = [x, m.VALUE, os.path.abspath(m.__file__), os.getpid()]
        archived = os.path.join("mydata", "table", "values.txt")  # -pyarch's alias, in the executor's working dir
        if os.path.exists(archived):
            with open(archived) as f:
                found["@archive"] = [x, f.read().strip(), os.getcwd(), os.getpid()]
        return json.dumps(found)


    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    found = [json.loads(r) for r in env.from_collection(list(range(6))).map(where).execute_and_collect()]
    rows = {name: sorted(f[name] for f in found) for name in sys.argv[1:]}
    archive = sorted(f["@archive"] for f in found if "@archive" in f)
    print("RESULT " + json.dumps({"rows": rows, "archive": archive, "driver_pid": os.getpid()}))
    """
).replace("import json\n", "import json\nimport os\n", 1)


def run(tmp_path, *args, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLOWPOINT_HOME=str(tmp_path / "home"), PIP_NO_INDEX="1",
               PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "tests")]))
    workdir = tmp_path / "elsewhere"
    workdir.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "flowpoint.cli", "run", "-m", MASTER, *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=str(workdir))


def result(proc: subprocess.CompletedProcess, module: str | None = None) -> dict:
    """The job's result; of JOB, the rows of ``module`` (one of the names it was given)."""
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    if module is not None:
        out["rows"] = out["rows"][module]
    return out


def job_script(tmp_path) -> str:
    scripts = tmp_path / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    path = scripts / "job.py"
    path.write_text(JOB)
    return str(path)


def assert_from_executors(out: dict, value, not_under: str) -> list[str]:
    rows = out["rows"]
    assert [r[0] for r in rows] == list(range(6))
    assert {r[1] for r in rows} == {value}
    files = [r[2] for r in rows]
    for f in files:  # Spark's copy, not the original on the driver's disk
        assert not f.startswith(not_under), f
    assert out["driver_pid"] not in {r[3] for r in rows}  # computed in executor processes
    return files


def module(directory, name: str, value) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(f"VALUE = {value!r}\n")


def wheel(directory, name: str, value) -> str:
    """A pure-Python wheel made by hand (pip installs it offline; no build step)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-0.1-py3-none-any.whl"
    info = f"{name}-0.1.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = {value!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{k},,\n" for k in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{info}/RECORD", record)
    return path.name


def start(tmp_path, *args) -> subprocess.Popen:
    env = dict(os.environ, FLOWPOINT_HOME=str(tmp_path / "home"), PIP_NO_INDEX="1",
               PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "tests")]))
    workdir = tmp_path / "elsewhere"
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "flowpoint.cli", "run", "-m", MASTER, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=str(workdir))


def finished(proc: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """Two CLI runs at once (each starts Spark on separate executors): one job given every
    option together (``-pyfs`` a file, a directory and a package, ``-pyreq`` a requirements file,
    ``-pyarch`` an archive, ``-pym`` the job as a module of the shipped package), and the same
    job without ``-pyfs``. ``(the tmp dir, the full run, the run without -pyfs)``."""
    tmp_path = tmp_path_factory.mktemp("shipped")
    module(tmp_path / "deps", "shippedfile", 11)
    module(tmp_path / "lib" / "shippedpkg", "__init__", 12)
    reqs = tmp_path / "reqs"
    name = wheel(reqs / "wheels", "reqmod", 21)
    (reqs / "requirements.txt").write_text(f"./wheels/{name}\n")  # relative to the file's folder
    src = tmp_path / "src" / "jobpkg"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "helper.py").write_text("VALUE = 31\n")
    (src / "job.py").write_text(JOB)
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("table/values.txt", "from the archive\n")
    pyfs = [str(tmp_path / "deps" / "shippedfile.py"), str(tmp_path / "lib"), str(tmp_path / "src")]
    full = start(tmp_path / "full", "-pyfs", ",".join(pyfs), "-pyreq", str(reqs / "requirements.txt"),
                 "-pyarch", f"{archive}#mydata", "-pym", "jobpkg.job", "shippedfile", "shippedpkg", "reqmod", "jobpkg.helper")
    bare = start(tmp_path / "bare", job_script(tmp_path / "bare"), "shippedfile")
    return tmp_path, finished(full), finished(bare)


@pytest.mark.slow
def test_without_pyfs_the_module_is_not_found(shipped):
    proc = shipped[2]
    assert proc.returncode != 0
    assert "No module named 'shippedfile'" in proc.stderr


@pytest.mark.slow
def test_pyfs_and_pyreq_ship_a_file_a_directory_and_requirements_to_the_executors(shipped):
    tmp_path, proc, _ = shipped
    assert_from_executors(result(proc, "shippedfile"), 11, str(tmp_path))
    found = assert_from_executors(result(proc, "shippedpkg"), 12, str(tmp_path))
    assert all(".zip" in f for f in found), found  # the directory travels zipped
    installed = assert_from_executors(result(proc, "reqmod"), 21, str(tmp_path))
    assert all(".zip" in f for f in installed), installed
    assert not any(f.startswith(str(tmp_path / "full" / "home")) for f in installed)  # not the driver's install


@pytest.mark.slow
def test_pyarch_unpacks_the_archive_under_its_alias(shipped):
    tmp_path, proc, _ = shipped
    out = result(proc)
    archive = out["archive"]
    assert [r[0] for r in archive] == list(range(6))
    assert {r[1] for r in archive} == {"from the archive"}
    assert out["driver_pid"] not in {r[3] for r in archive}
    assert not any(r[2].startswith(str(tmp_path)) for r in archive)  # the executor's working dir


@pytest.mark.slow
def test_pym_runs_a_module_shipped_with_pyfs(shipped):
    tmp_path, proc, _ = shipped
    files = assert_from_executors(result(proc, "jobpkg.helper"), 31, str(tmp_path))
    assert all(".zip" in f for f in files), files


def test_pym_without_the_module_is_a_clear_error(tmp_path):
    proc = run(tmp_path, "-pym", "nosuchpkg.job")
    assert proc.returncode == 1
    assert "-pym nosuchpkg.job: no such module" in proc.stderr


# -- refused before Spark starts --------------------------------------------------------------

def refused(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "Spark" not in proc.stderr and "started Spark" not in proc.stdout
    return proc.stderr


def test_a_missing_pyfs_path_is_refused_naming_option_and_path(tmp_path):
    missing = tmp_path / "nope" / "util.py"
    err = refused(run(tmp_path, "-pyfs", str(missing), job_script(tmp_path), "x"))
    assert "-pyfs" in err and str(missing) in err and "not found" in err


def test_a_missing_or_unreadable_requirements_file_is_refused(tmp_path):
    missing = tmp_path / "requirements.txt"
    err = refused(run(tmp_path, "-pyreq", str(missing), job_script(tmp_path), "x"))
    assert "-pyreq" in err and str(missing) in err and "not found" in err
    unreadable = tmp_path / "reqdir"
    unreadable.mkdir()  # (a folder: root reads a file without read permission)
    err = refused(run(tmp_path, "-pyreq", str(unreadable), job_script(tmp_path), "x"))
    assert "-pyreq" in err and str(unreadable) in err and "cannot be read" in err


def test_a_failing_pip_install_is_refused(tmp_path):
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("no-such-distribution-flowpoint-test==1.0\n")  # PIP_NO_INDEX: nowhere to find it
    err = refused(run(tmp_path, "-pyreq", str(reqs), job_script(tmp_path), "x"))
    assert "-pyreq" in err and str(reqs) in err and "failed" in err
    assert "no-such-distribution-flowpoint-test" in err  # pip's own reason


def test_a_missing_archive_is_refused(tmp_path):
    missing = tmp_path / "env.zip"
    err = refused(run(tmp_path, "-pyarch", f"{missing}#env", job_script(tmp_path), "x"))
    assert "-pyarch" in err and str(missing) in err and "not found" in err


def test_the_errors_are_configuration_errors():
    from flowpoint.errors import ConfigurationError
    from flowpoint.python_deps import PythonDependencyError

    assert issubclass(PythonDependencyError, ConfigurationError)


def test_a_pyfs_zip_folder_another_user_created_first_is_refused(tmp_path, other_uid):
    """The zip of a -pyfs directory goes into /tmp/flowpoint-pyfs-<uid>-<hash>: another local user
    who created that folder first could swap the zip (code the executors run), so it is refused."""
    import hashlib
    import tempfile

    from flowpoint.errors import InsecurePathError
    from flowpoint.python_deps import zip_directory

    module(tmp_path / "lib", "shipped", 1)
    src = (tmp_path / "lib").resolve()
    planted = os.path.join(tempfile.gettempdir(), f"flowpoint-pyfs-{os.getuid()}-{hashlib.sha256(str(src).encode()).hexdigest()[:16]}")
    os.makedirs(planted, exist_ok=True)
    try:
        os.chown(planted, other_uid, -1)
        os.chmod(planted, 0o777)
        with pytest.raises(InsecurePathError) as info:
            zip_directory(str(src))
        assert planted in str(info.value) and "-pyfs" in str(info.value)
        assert os.listdir(planted) == []  # nothing written into it
    finally:
        import shutil

        shutil.rmtree(planted, ignore_errors=True)
    with zipfile.ZipFile(zip_directory(str(src))) as z:  # a folder of its own: created 0700
        assert z.namelist() == ["shipped.py"]
