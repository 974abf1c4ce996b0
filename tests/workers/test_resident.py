import os

from tests.playground.conftest import TINY
from workers.resident import resident_clear, resident_model, resident_paths


def test_a_model_is_loaded_once_per_process_and_kept():
    # given
    resident_clear()

    # when
    first, second = resident_model(TINY), resident_model(str(TINY) + "/")

    # then
    assert first is second
    assert resident_paths() == [TINY.resolve()]
    assert first.config.total_ut_steps == 4


def test_a_checkpoint_rewritten_in_place_is_loaded_again(tmp_path):
    # given
    for item in TINY.iterdir():
        (tmp_path / item.name).symlink_to(item)
    first = resident_model(tmp_path)

    # when: config.json is newer
    stat = os.stat(TINY / "config.json")
    os.utime(tmp_path / "config.json", (stat.st_atime, stat.st_mtime + 10), follow_symlinks=False)
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").write_text((TINY / "config.json").read_text())

    # then
    assert resident_model(tmp_path) is not first
