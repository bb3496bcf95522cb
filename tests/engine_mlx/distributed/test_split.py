"""Which layers each rank holds: its share of the weights follows its memory, rank 0's
embeddings and head counted."""

from __future__ import annotations

import pytest

from engine_mlx.distributed.split import checkpoint_bytes, split_layers
from engine_mlx.errors import EngineError


@pytest.mark.parametrize(
    "layers,rest,memory,expected",
    [
        (24, 0, [16, 16], [12, 12]),
        (24, 0, [32, 16], [16, 8]),
        (24, 0, [8, 16, 24], [4, 8, 12]),
        (24, 90, [16, 16], [8, 16]),  # rank 0's embeddings weigh nine layers
        (3, 0, [100, 1, 1], [1, 1, 1]),  # every rank keeps at least one layer
        (4, 500, [1, 1], [1, 3]),
        (6, 0, [0, 0], [3, 3]),  # no memory figure: an even split
    ],
)
def test_each_ranks_share_of_the_weights_follows_its_memory(layers, rest, memory, expected):
    assert split_layers([10] * layers, rest, memory) == expected


def test_a_fixed_split_is_taken_as_given_or_refused_with_what_to_give():
    assert split_layers([10] * 24, 0, [1, 1], "10,14") == [10, 14]
    for bad in ("10,10", "24,0", "a,b", "24"):
        with pytest.raises(EngineError, match="2 positive layer counts that add up to"):
            split_layers([10] * 24, 0, [1, 1], bad)
    with pytest.raises(EngineError, match="cannot be split across 3 ranks"):
        split_layers([10, 10], 0, [1, 1, 1])


def test_the_bytes_come_from_the_checkpoints_headers(tiny_model_dir):
    from safetensors.numpy import load_file

    folder = tiny_model_dir("qwen3")
    weights = {}
    for file in folder.glob("*.safetensors"):
        weights.update(load_file(file))
    per_layer, rest = checkpoint_bytes(folder, 3)
    layer0 = sum(v.nbytes for k, v in weights.items() if ".layers.0." in k)
    assert per_layer[0] == layer0 > 0 and len(per_layer) == 3
    assert sum(per_layer) + rest == sum(v.nbytes for v in weights.values())
    assert rest >= weights["model.embed_tokens.weight"].nbytes
