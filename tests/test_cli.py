"""Tests of the command lines' option checks (issue 14): ``aiayn translate`` and ``aiayn evaluate`` answer a bad
or unavailable ``--device`` and a bad ``--beam-size`` / ``--alpha`` / ``--max-len`` with exit code 2 and one
line on standard error, never a traceback; :class:`aiayn.Translator` rejects the same values with a ValueError.
Uses the tiny checkpoints of ``tests/conftest.py``."""
from __future__ import annotations

import math

import pytest
import torch

from aiayn.cli import main as aiayn_main
from aiayn.decoding import beam_option_error
from aiayn.devices import pick_device


def _run(argv, capsys):
    code = aiayn_main(argv)
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize("device, message", [
    ("banana", "unknown device 'banana'"),
    ("cuda:99", "cuda:99"),
    ("meta", "not supported"),
])
def test_translate_bad_device_is_one_line_exit_2(device, message, tiny_checkpoints, capsys):
    code, lines = _run(["translate", "--checkpoint", str(tiny_checkpoints / "en-de"), "--device", device, "hello"], capsys)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("aiayn translate: ") and message in lines[0]
    assert "Traceback" not in lines[0]


def test_translate_cuda_on_a_cpu_only_torch_is_one_line_exit_2(tiny_checkpoints, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, lines = _run(["translate", "--checkpoint", str(tiny_checkpoints / "en-de"), "--device", "cuda", "hello"], capsys)
    assert code == 2
    assert len(lines) == 1 and "CUDA is not available" in lines[0] and "--device cpu" in lines[0]


@pytest.mark.parametrize("option, value, message", [
    ("--alpha", "-5", "--alpha must be a finite number >= 0"),
    ("--alpha", "nan", "--alpha must be a finite number >= 0"),
    ("--alpha", "inf", "--alpha must be a finite number >= 0"),
    ("--beam-size", "0", "--beam-size must be >= 1"),
    ("--beam-size", "-3", "--beam-size must be >= 1"),
    ("--max-len", "0", "--max-len must be >= 1"),
])
def test_translate_bad_decoding_values_are_one_line_exit_2(option, value, message, tiny_checkpoints, capsys):
    code, lines = _run(["translate", "--checkpoint", str(tiny_checkpoints / "en-de"), option, value, "hello"], capsys)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(f"aiayn translate: {message}") and lines[0].endswith(f"got {float(value) if option == '--alpha' else value}")
    assert capsys.readouterr().out == ""  # nothing translated


def test_translate_good_values_still_translate(tiny_checkpoints, capsys):
    code = aiayn_main(["translate", "--checkpoint", str(tiny_checkpoints / "en-de"), "--device", "cpu", "--alpha", "0",
                       "--beam-size", "2", "--max-len", "4", "hello"])
    out = capsys.readouterr()
    assert code == 0 and len(out.out.splitlines()) == 1 and out.err == ""


def test_evaluate_bad_device_is_one_line_exit_2(tiny_checkpoints, tmp_path, capsys):
    (tmp_path / "test.tsv").write_text("de\ten\nHallo\tHello\n", encoding="utf-8")
    code, lines = _run(["evaluate", "--checkpoint", str(tiny_checkpoints / "en-de"), "--data", str(tmp_path),
                        "--device", "banana", "--no-progress"], capsys)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("aiayn evaluate: ") and "unknown device 'banana'" in lines[0]


@pytest.mark.parametrize("option, value, message", [
    ("--alpha", "-1", "--alpha must be a finite number >= 0"),
    ("--beam-size", "0", "--beam-size must be >= 1"),
    ("--max-len", "0", "--max-len must be >= 1"),
])
def test_evaluate_bad_decoding_values_are_one_line_exit_2(option, value, message, tiny_checkpoints, tmp_path, capsys):
    """The same check as aiayn translate (one function, aiayn.decoding.beam_option_error)."""
    (tmp_path / "test.tsv").write_text("de\ten\nHallo\tHello\n", encoding="utf-8")
    code, lines = _run(["evaluate", "--checkpoint", str(tiny_checkpoints / "en-de"), "--data", str(tmp_path),
                        option, value, "--no-progress"], capsys)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(f"aiayn evaluate: {message}")


def test_pick_device_checks_what_exists():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown device"):
        pick_device("banana")
    with pytest.raises(ValueError, match=r"cuda:\d+"):
        pick_device(f"cuda:{torch.cuda.device_count() + 3}")


def test_beam_option_error_by_hand():
    """One check for the command lines (flags) and the library (keywords)."""
    assert beam_option_error(beam_size=4, length_penalty=0.6, max_len=None, cli=True) is None
    assert beam_option_error(length_penalty=0.0, cli=True) is None
    assert "--alpha" in beam_option_error(length_penalty=-0.1, cli=True)
    assert "--alpha" in beam_option_error(length_penalty=math.inf, cli=True)
    assert "--beam-size" in beam_option_error(beam_size=0, cli=True)
    assert "--max-len" in beam_option_error(max_len=-1, cli=True)
    assert beam_option_error(n_best=0).startswith("n_best must be >= 1")
    assert beam_option_error(beam_size=True).startswith("beam_size must be >= 1")
    assert beam_option_error(length_penalty="0.6").startswith("length_penalty (alpha) must be a finite number")
    with pytest.raises(TypeError, match="unknown beam option"):
        beam_option_error(beam=4)


@pytest.mark.parametrize("kwargs, message", [
    (dict(length_penalty=-5.0), "length_penalty"),
    (dict(length_penalty=float("nan")), "length_penalty"),
    (dict(length_penalty="0.6"), "length_penalty"),
    (dict(beam_size=True), "beam_size"),
    (dict(n_best=0), "n_best"),
    (dict(max_len=2.5), "max_len"),
])
def test_translator_rejects_bad_decoding_values(tiny_translator, kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_translator.translate("hello", **kwargs)


def test_translate_direction_contradicting_the_checkpoint_is_one_line_exit_2(tiny_checkpoints, capsys):
    """The checkpoint records its direction: ``--direction de-en`` with an en-de checkpoint is refused, not
    silently ignored; the matching direction is accepted."""
    code, lines = _run(["translate", "--direction", "de-en", "-c", str(tiny_checkpoints / "en-de"), "--device", "cpu",
                        "hello"], capsys)
    assert code == 2
    assert len(lines) == 1 and "--direction de-en contradicts the checkpoint, which translates en-de" in lines[0]
    assert capsys.readouterr().out == ""
    code = aiayn_main(["translate", "--direction", "en-de", "-c", str(tiny_checkpoints / "en-de"), "--device", "cpu",
                       "--beam-size", "1", "--max-len", "3", "hello"])
    assert code == 0 and len(capsys.readouterr().out.splitlines()) == 1


def test_translate_piped_input_keeps_one_line_per_line_blank_ones_too(tiny_checkpoints, capsys, monkeypatch):
    import io

    from aiayn import Translator

    lines_in = ["hello", "", "   ", "the house", "good morning"]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines_in) + "\n"))
    code = aiayn_main(["translate", "-c", str(tiny_checkpoints / "en-de"), "--device", "cpu", "--beam-size", "2",
                       "--max-len", "5"])
    out = capsys.readouterr().out.split("\n")
    assert code == 0 and out[-1] == "" and len(out) - 1 == len(lines_in)
    tr = Translator.load(tiny_checkpoints / "en-de", device="cpu")
    for text, got in zip(lines_in, out):
        want = tr.translate(text, beam_size=2, max_len=5, return_attention=False).text if text.strip() else ""
        assert got == want
