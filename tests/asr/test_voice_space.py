"""The voice space speakers are clustered in (extractor/asr/voice_space.py): shipped in the
package, the same projection every time, and fitted so that voices, not words, set it apart."""

from __future__ import annotations

import numpy as np

from extractor.asr import voice_space


def test_the_shipped_space_projects_cam_embeddings_to_unit_vectors() -> None:
    assert voice_space.SPACE.is_file()  # package data: installed with the wheel
    space = voice_space.shipped()
    assert space.projection.shape == (192, 32)
    embeddings = np.random.default_rng(0).normal(size=(7, 192)).astype(np.float32)
    voiced = space.project(embeddings)
    assert voiced.shape == (7, 32)
    assert np.allclose(np.linalg.norm(voiced, axis=1), 1.0)
    assert np.array_equal(voiced, space.project(embeddings.copy()))  # same input, same output


def test_fitting_keeps_what_tells_voices_apart_and_drops_what_one_voice_varies() -> None:
    """Two voices apart along axis 0, each varying far more along axis 1 (what is said):
    the first direction of the fitted space is axis 0, not axis 1."""
    rng = np.random.default_rng(1)
    groups = []
    for talk in range(6):
        for voice in (-1.0, 1.0):
            rows = rng.normal(scale=0.01, size=(40, 192))
            rows[:, 2] += 1.0  # a common direction, so rows stay away from the origin
            rows[:, 0] += 0.1 * voice + 0.02 * talk
            rows[:, 1] += rng.normal(scale=0.3, size=40)  # words, not voices
            groups.append(rows)
    space = voice_space.fit(groups, dims=2)
    first = space.projection[:, 0] / np.linalg.norm(space.projection[:, 0])
    assert abs(first[0]) > 0.9 > 0.1 > abs(first[1])
    again = voice_space.fit(groups, dims=2)
    assert np.array_equal(space.projection, again.projection)  # signs fixed: refits agree
