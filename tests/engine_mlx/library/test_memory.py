"""Memory estimates budget an 8k-token cache over the attention layers only."""

from __future__ import annotations

from engine_mlx.library.memory import estimate_memory


def test_memory_estimate_counts_only_attention_layers_of_hybrids() -> None:
    base = {
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "max_position_embeddings": 32768,
    }
    dense = estimate_memory(base, 0)
    hybrid = estimate_memory({**base, "full_attention_interval": 4}, 0)
    kv_per_layer = 2 * 4 * 128 * 2 * 8192
    assert dense - hybrid == kv_per_layer * (32 - 8)


def test_usable_memory_is_the_ram_off_a_mac_and_without_metal(monkeypatch) -> None:
    from engine_mlx.library import memory

    assert memory.usable_memory() == memory.physical_memory()
    monkeypatch.setattr(memory, "unified_memory", lambda: True)  # a Mac whose Metal is off
    assert memory.usable_memory() == memory.physical_memory()
