"""show_source prints the real code of a helper, or says why it cannot."""

from __future__ import annotations

import pytest

from dpsim.course.show import show_source
from dpsim.runtime.launch.rank import join_group


def test_shows_the_torch_calls_behind_launch(capsys: pytest.CaptureFixture[str]) -> None:
    text = show_source(join_group)
    assert "dist.init_process_group(" in text
    assert "torch.cuda.set_device(" in text
    assert "rank.py:" in text.splitlines()[0]
    assert capsys.readouterr().out.strip() == text.strip()


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="fn="):
        show_source(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no Python source"):
        show_source(len)
