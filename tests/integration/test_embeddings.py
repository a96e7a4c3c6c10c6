"""The embedding cache with the real MiniLM: each text is encoded once, ever; the vectors feed k-center
selection."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from scoring.embeddings import EmbeddingCache, EmbeddingInputError

pytestmark = pytest.mark.slow

TEXTS = [
    "How did serfdom develop in and then leave Russia ?",
    "What films featured the character Popeye Doyle ?",
    "How can I find a list of celebrities ' real names ?",
    "What fowl grabs the spotlight after the Chinese Year of the Monkey ?",
    "What is the full form of .com ?",
    "What contemptible scoundrel stole the cork from my lunch ?",
]


def _hashes(texts: list[str]) -> list[str]:
    return [hashlib.sha256(t.encode()).hexdigest() for t in texts]


class CountingCache(EmbeddingCache):
    """Records every batch sent to the encoder."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.calls: list[list[str]] = []

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(texts)
        return super()._encode(texts)


@pytest.fixture(scope="module")
def encoder(encoder_dir: Path):  # type: ignore[no-untyped-def]
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(encoder_dir), device="cpu")


def test_each_text_is_encoded_once_and_matches_a_fresh_encode(
    tmp_path: Path, encoder_dir: Path, encoder: object
) -> None:
    cache = CountingCache(tmp_path, encoder_dir, device="cpu")
    first = cache.embed(TEXTS[:4], _hashes(TEXTS[:4]))
    assert first.dtype == np.float32 and first.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)

    again = cache.embed(TEXTS[:4], _hashes(TEXTS[:4]))
    assert len(cache.calls) == 1  # the second call computed nothing
    np.testing.assert_array_equal(first, again)

    # A new import with two old and two new texts (one repeated) embeds only the two new ones.
    batch = [TEXTS[1], TEXTS[4], TEXTS[0], TEXTS[5], TEXTS[4]]
    mixed = cache.embed(batch, _hashes(batch))
    assert cache.calls[1] == [TEXTS[4], TEXTS[5]]

    fresh = encoder.encode(batch, normalize_embeddings=True)  # type: ignore[attr-defined]
    np.testing.assert_allclose(mixed, fresh, atol=1e-5)


def test_a_second_process_sees_the_first_ones_vectors(tmp_path: Path, encoder_dir: Path) -> None:
    writer = EmbeddingCache(tmp_path, encoder_dir, device="cpu")
    reader = CountingCache(tmp_path, encoder_dir, device="cpu")
    reader.embed(TEXTS[:1], _hashes(TEXTS[:1]))  # the reader has loaded its view of the cache
    writer.embed(TEXTS, _hashes(TEXTS))
    reader.embed(TEXTS, _hashes(TEXTS))
    assert reader.calls == [TEXTS[:1]]
    assert not list(tmp_path.rglob("*.tmp"))


def test_mismatched_lengths_are_rejected(tmp_path: Path, encoder_dir: Path) -> None:
    with pytest.raises(EmbeddingInputError):
        EmbeddingCache(tmp_path, encoder_dir).embed(TEXTS[:2], _hashes(TEXTS[:1]))
