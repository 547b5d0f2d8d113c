"""Parameter counts derived from architecture numbers, for configs that do not state one.

The count decides weight memory (``parameters × bytes per parameter``), so it follows the layer shapes vLLM
builds: token embedding and LM head (tied or not), attention projections (GQA: K and V have ``kv_heads ×
head_dim`` outputs; MLA: the low-rank Q/KV factors), a gated MLP (three matrices) or MoE experts plus router and
shared experts, and the norms. Biases are counted where the family has them (Qwen2 QKV). The result is within
about 1 % of published counts for the catalog's models (tested), which is well inside the other uncertainties
of a memory plan; a published count, when known, always wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.specs import LayerType, StateSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class ParameterInputs:
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int | None
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    qkv_bias: bool = False
    attention_output_gate: bool = False  # Qwen3-Next / Qwen3.5 gated attention: q_proj also emits the gate
    layer_types: tuple[LayerType, ...] = ()
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    num_experts: int | None = None
    moe_intermediate_size: int | None = None
    num_shared_experts: int | None = None
    shared_expert_intermediate_size: int | None = None
    first_k_dense_replace: int = 0
    state: StateSpec | None = None


def attention_parameters(p: ParameterInputs, kind: LayerType) -> int:
    h = p.hidden_size
    if kind is LayerType.MLA:
        rope = p.qk_rope_head_dim or 0
        nope = p.qk_nope_head_dim or 0
        v_dim = p.v_head_dim or nope
        heads = p.num_attention_heads
        lora = p.kv_lora_rank or 0
        q = (
            h * heads * (nope + rope)
            if not p.q_lora_rank
            else h * p.q_lora_rank + p.q_lora_rank * heads * (nope + rope) + p.q_lora_rank
        )
        kv_a = h * (lora + rope) + lora  # down-projection to the latent (+ its norm)
        kv_b = lora * heads * (nope + v_dim)
        out = heads * v_dim * h
        return q + kv_a + kv_b + out
    # With an output gate the query projection is twice as wide (vLLM ``qwen3_next.py``: ``QKVParallelLinear``
    # over ``total_num_heads * (1 + attn_output_gate)`` heads, v0.10.2 onwards).
    q = h * p.num_attention_heads * p.head_dim * (2 if p.attention_output_gate else 1)
    kv = 2 * h * p.num_key_value_heads * p.head_dim
    out = p.num_attention_heads * p.head_dim * h
    bias = (p.num_attention_heads + 2 * p.num_key_value_heads) * p.head_dim if p.qkv_bias else 0
    return q + kv + out + bias


def state_parameters(p: ParameterInputs, state: StateSpec) -> int:
    h = p.hidden_size
    if state.kind == "gated_delta_net":
        key_dim = state.num_k_heads * state.head_k_dim
        value_dim = state.num_v_heads * state.head_v_dim
        in_proj = h * (2 * key_dim + 2 * value_dim + 2 * state.num_v_heads)
        conv = (2 * key_dim + value_dim) * state.conv_kernel
        return in_proj + conv + value_dim * h + 2 * state.num_v_heads
    inner = state.intermediate_size
    if state.kind == "short_conv":
        # Lfm2ShortConv: in_proj h → 3·conv_dim (B, C, x), a depthwise conv, out_proj conv_dim → h.
        return h * 3 * inner + inner * state.conv_kernel + inner * h
    if state.kind == "mamba2":
        conv_dim = inner + 2 * state.n_groups * state.state_size
        in_proj = h * (inner + conv_dim + state.num_heads)
        return in_proj + conv_dim * state.conv_kernel + inner * h + 3 * state.num_heads + inner
    # mamba1: in_proj (x, z), conv, x_proj (dt, B, C), dt_proj, A and D, out_proj
    dt_rank = -(h // -16)
    return (
        h * 2 * inner
        + inner * state.conv_kernel
        + inner * (dt_rank + 2 * state.state_size)
        + dt_rank * inner
        + inner * state.state_size
        + inner
        + inner * h
    )


def mlp_parameters(p: ParameterInputs, layer_index: int) -> int:
    h = p.hidden_size
    matrices = 3 if p.gated_mlp else 2
    if p.num_experts and p.num_experts > 1 and layer_index >= p.first_k_dense_replace:
        expert = matrices * h * (p.moe_intermediate_size or p.intermediate_size or 0)
        shared = 0
        if p.shared_expert_intermediate_size:
            shared = matrices * h * p.shared_expert_intermediate_size + h  # + shared-expert gate
        elif p.num_shared_experts:
            shared = (
                p.num_shared_experts * matrices * h * (p.moe_intermediate_size or p.intermediate_size or 0)
            )
        return p.num_experts * expert + shared + h * p.num_experts  # router
    return matrices * h * (p.intermediate_size or 4 * h)


def estimate_num_parameters(p: ParameterInputs) -> int:
    """Total parameters of a decoder-only model with the given shapes (see module docstring)."""
    layer_types = p.layer_types or (LayerType.FULL,) * p.num_hidden_layers
    embed = p.vocab_size * p.hidden_size
    lm_head = 0 if p.tie_word_embeddings else embed
    total = embed + lm_head + p.hidden_size  # final norm
    # Models that list MLP-only blocks (Nemotron-H's hybrid_override_pattern) have one mixer or one MLP per
    # block, each with a single norm; elsewhere every layer has both and two norms.
    separate_mlp_blocks = LayerType.MLP in layer_types
    for index, kind in enumerate(layer_types):
        if kind.is_attention:
            mixer = attention_parameters(p, kind)
            if p.state is not None and p.state.parallel_to_attention:
                mixer += state_parameters(p, p.state)
        elif kind.is_state and p.state is not None:
            mixer = state_parameters(p, p.state)
        else:
            mixer = 0
        if separate_mlp_blocks:
            total += (mlp_parameters(p, index) if kind is LayerType.MLP else mixer) + p.hidden_size
        else:
            total += mixer + mlp_parameters(p, index) + 2 * p.hidden_size
    return total
