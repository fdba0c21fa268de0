"""Progress notes for long phases go to stderr, only for phases still running after the delay."""

from __future__ import annotations

import time

from torch_neuronx._progress import slow_step


def wait_for(capsys, text: str, seen: list[str]) -> None:
    for _ in range(1000):  # bounded: up to ~10 s for the timer thread to run
        seen.append(capsys.readouterr().err)
        if text in "".join(seen):
            return
        time.sleep(0.01)


def test_a_long_phase_is_announced_then_timed(capsys):
    seen: list[str] = []
    with slow_step("compiling something", delay_s=0.0):
        wait_for(capsys, "compiling something ...", seen)
    seen.append(capsys.readouterr().err)
    err = "".join(seen)
    assert "[neuron] compiling something ...\n" in err
    assert "[neuron] compiling something: done in " in err
    assert capsys.readouterr().out == ""  # nothing on stdout


def test_a_short_phase_says_nothing(capsys):
    with slow_step("quick", delay_s=60.0):
        pass
    assert capsys.readouterr().err == ""


def test_silenced_by_env_and_on_other_ranks(capsys, monkeypatch):
    monkeypatch.setenv("NEURON_EMU_PROGRESS", "0")
    with slow_step("a", delay_s=0.0):
        time.sleep(0.05)
    monkeypatch.setenv("NEURON_EMU_PROGRESS", "1")
    monkeypatch.setenv("RANK", "1")
    with slow_step("b", delay_s=0.0):
        time.sleep(0.05)
    assert capsys.readouterr().err == ""
