"""Tests of the binding that need no daemon (run by scripts/test with
RINGCAP_LIB pointing at the built libringcap.so). The live tests, as nobody
against ringcapd over veth, are in live_session.py, run by
crates/daemon/tests/python_client.rs."""

import os
import tempfile

import pytest

import ringcap


def test_the_library_loads_and_has_a_version():
    lib = ringcap.library()
    assert lib.ringcap_version().decode().count(".") == 2


def test_an_unreachable_daemon_is_an_io_error_with_a_message():
    d = tempfile.mkdtemp()
    with pytest.raises(ringcap.RingcapError) as e:
        ringcap.Session("eth0", socket=os.path.join(d, "none.sock"))
    assert e.value.code == ringcap.ERR_IO
    assert "cannot reach ringcapd" in str(e.value)
    # With compress: the options struct (its size) is still one the library
    # knows, so it is the socket that fails.
    with pytest.raises(ringcap.RingcapError) as e:
        ringcap.Session("eth0", compress=True, socket=os.path.join(d, "none.sock"))
    assert e.value.code == ringcap.ERR_IO, e.value
    os.rmdir(d)


def test_bad_arguments_are_refused_before_connecting():
    with pytest.raises(ringcap.RingcapError) as e:
        ringcap.Session("", socket="/nonexistent/ringcapd.sock")
    assert e.value.code == ringcap.ERR_ARG
    with pytest.raises(ringcap.RingcapError) as e:
        ringcap.Session("eth0", sample_packets=2, sample_flows=2, socket="/nonexistent/x.sock")
    assert e.value.code == ringcap.ERR_ARG
    with pytest.raises(TypeError):
        ringcap.Session("eth0", filter=42)


def test_packets_compare_by_value():
    a = ringcap.Packet(1, 60, b"\x00" * 14)
    assert a == ringcap.Packet(1, 60, b"\x00" * 14)
    assert a != ringcap.Packet(2, 60, b"\x00" * 14)
    assert "wire_len=60" in repr(a)


def test_pip_installs_the_package_into_a_venv(tmp_path):
    """`pip install ./python` with the system python3 (offline: a venv that
    sees Debian's setuptools and wheel; a plain venv fetches them)."""
    import subprocess
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
    subprocess.run(pip + ["--no-build-isolation", here], check=True, cwd=tmp_path)
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import ringcap; print(ringcap.__file__)"],
        check=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout
    assert out.startswith(str(venv)), out
