"""The cache the numpy layers write in place: the same logits as mlx-lm's cache through decoding,
growth past its buffer, rollback and a restored snapshot; rows written in place only where the
buffer is its own (a snapshot it handed out stays as it was, even after the cache is trimmed
below it and written again)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache

from engine_mlx.cpu import quantized_product
from engine_mlx.models.inplace_kv_cache import InPlaceKVCache
from engine_mlx.models.quantize import quantize_folder
from engine_mlx.models.target import TargetModel
from engine_mlx.prompt_cache import restore_cache, snapshot_cache


@pytest.fixture(scope="module")
def target(tiny_model_dir, tmp_path_factory) -> TargetModel:
    if not quantized_product.int8_activations():
        pytest.skip("the numpy layers run where activations are rounded to int8")
    out = tmp_path_factory.mktemp("inplace") / "model"
    model = TargetModel.load(quantize_folder(tiny_model_dir("qwen2"), out, bits=4, group=32))
    assert model._numpy_layers is not None
    return model


def _rows(seed: int, n: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((2, n, 8)).astype(np.float32) for _ in range(2))


def test_rows_go_into_the_buffer_and_a_snapshot_is_never_written():
    cache = InPlaceKVCache()
    assert not cache.write_rows(*_rows(0))  # no buffer yet: MLX's update makes one
    cache.update_and_fetch(*(mx.array(a[None]) for a in _rows(0)))
    mx.eval(cache.settle())
    buffer = cache.keys
    assert cache.write_rows(*_rows(1)) and cache.offset == 4
    assert cache.keys is buffer and np.array_equal(np.array(buffer)[0, :, 2:4], _rows(1)[0])
    kept = snapshot_cache([cache])  # the arrays are handed out: never written again
    before = np.array(kept[0][1][0])
    cache.trim(3)
    assert not cache.write_rows(*_rows(2))
    cache.update_and_fetch(*(mx.array(a[None]) for a in _rows(2)))
    mx.eval(cache.settle())
    assert cache.keys is not buffer and np.array_equal(np.array(kept[0][1][0]), before)
    assert cache.write_rows(*_rows(3))  # a copy of its own: in place again
    restored = restore_cache(kept)[0]
    assert not restored.write_rows(*_rows(4))  # adopted arrays are the snapshot's
    assert np.array_equal(np.array(kept[0][1][0]), before)


def test_no_room_or_another_dtype_takes_mlxs_update():
    cache = InPlaceKVCache()
    cache.update_and_fetch(*(mx.array(a[None]) for a in _rows(0, n=KVCache.step)))
    assert not cache.write_rows(*_rows(1))  # full: the update grows it
    half = InPlaceKVCache()
    half.update_and_fetch(*(mx.array(a[None]).astype(mx.float16) for a in _rows(0)))
    assert not half.write_rows(*_rows(1))


@pytest.mark.parametrize("reuse", [False, True], ids=["fresh", "restored-snapshot"])
def test_the_target_decodes_as_with_mlx_lms_cache(target, reuse):
    """Prefill, 300 decoding steps (past the 256-row buffer), a tree verified and compacted, a
    rollback of 5 and more steps: every logit the same bits as through mlx-lm's own cache."""
    prompt = list(range(3, 40))
    logits = {}
    for kind in (KVCache, InPlaceKVCache):
        cache = [kind() for _ in target.layers]
        assert target.make_cache()[0].__class__ is InPlaceKVCache
        out = [np.array(target.forward(mx.array(prompt), cache).logits[0, -1])]
        if reuse:
            cache = restore_cache(snapshot_cache(cache))
        for step in range(300):
            token = mx.array([(7 * step) % 50 + 3])
            out.append(np.array(target.forward(token, cache).logits[0, -1]))
            if step == 150:
                for c in cache:
                    c.trim(5)
            if step == 100:  # a root and two children; the second child kept
                out.append(_verify_tree(target, cache))
        assert cache[0].offset == len(prompt) + 297
        logits[kind] = np.stack(out)
    assert np.array_equal(logits[KVCache], logits[InPlaceKVCache])


def _verify_tree(target: TargetModel, cache: list) -> np.ndarray:
    start = cache[0].offset
    tree = mx.array(np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool))
    mask = mx.concatenate([mx.ones((3, start), dtype=mx.bool_), tree], axis=1)
    logits = target.forward(
        mx.array([11, 12, 13]), cache, positions=mx.array([start, start + 1, start + 1]),
        mask=mask, tree=tree,
    ).logits[0]  # fmt: skip
    target.compact(cache, start, [0, 2])
    return np.array(logits[-1])
