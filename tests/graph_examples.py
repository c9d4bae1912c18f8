"""Named example cases of the graph patterns, for the graph tier's hand-written tests.

A name is ``pattern/what-it-shows``; a test picks its case by name, so adding an example never moves
another test's case. Every pattern has at least one (``tests/test_graph_consistency.py``), and each
runs three ways on ggml:CPU in ``tests/test_graph_tier.py``.
"""

from __future__ import annotations

from golden.graphs.case import GraphCase, parse_graph_id

EXAMPLES: dict[str, str] = {
    # decode (one row) and prefill, broadcast and swapped variants among them
    "rms_norm_mul/row_prefill": "GRAPH[rms_norm_mul](type=f32,ne=[8,3,1,1],w=row,order=xw,eps=1e-05,data=uniform:3)",
    "rms_norm_mul_add/full_wx_decode":
        "GRAPH[rms_norm_mul_add](type=f32,ne=[4096,1,1,1],w=full,order=wx,eps=1e-06,b=row,data=dense:2)",
    "add_rms_norm/row_prefill": "GRAPH[add_rms_norm](type=f32,ne=[33,7,1,1],b=row,eps=1e-06,data=uniform:4)",
    "add_rms_norm_mul/full_two_planes":
        "GRAPH[add_rms_norm_mul](type=f32,ne=[512,2,2,1],b=full,eps=1e-05,w=row,order=xw,data=uniform:5)",
    "add_chain/eight_full": "GRAPH[add_chain](type=f32,ne=[64,3,1,1],n=8,b=full,data=dense:6)",
    "mul_chain/five_row_decode": "GRAPH[mul_chain](type=f32,ne=[31,1,1,1],n=5,b=row,data=dense:7)",
    "mul_mat_add/f16_vec_decode": "GRAPH[mul_mat_add](type=f16,k=256,m=40,n=1,bias=vec,order=mb,data=uniform:8)",
    "mul_mat_add/f32_full_bm_prefill": "GRAPH[mul_mat_add](type=f32,k=65,m=9,n=5,bias=full,order=bm,data=dense:9)",
    "mul_mat_add/f32_full_mb_prefill": "GRAPH[mul_mat_add](type=f32,k=65,m=9,n=5,bias=full,order=mb,data=dense:9)",
    "mul_mat_add/f32_vec_prefill": "GRAPH[mul_mat_add](type=f32,k=65,m=9,n=5,bias=vec,order=mb,data=dense:9)",
    "softcap/cap30": "GRAPH[softcap](type=f32,ne=[100,2,1,1],cap=30.0,data=dense:10)",
    "gate_up_glu/f16_prefill": "GRAPH[gate_up_glu](type=f16,k=128,f=24,n=3,data=uniform:11)",
    "rope_pair/same": "GRAPH[rope_pair](type=f32,ne=[64,4,3,1],n_dims=64,mode=2,freq_base=10000.0,freq_scale=1.0,"
                      "ext_factor=0.0,pos=[5,900],second=same,data=uniform:12)",
    "rope_seq/yarn_padded": "GRAPH[rope_seq](type=f32,ne=[32,2,2,1],n_dims=16,mode=0,freq_base=500000.0,"
                            "freq_scale=0.25,ext_factor=1.0,p0=40,lay=pad[0,1,0,0],data=dense:13)",
    "llama_layer/q4_0_fa_prefill": "GRAPH[llama_layer](type=q4_0,hd=16,heads=2,n=3,kv=32,p0=7,ff=64,attn=fa,"
                                   "eps=1e-05,mode=2,n_dims=16,freq_base=10000.0,data=uniform:14)",
    "llama_layer/f16_softmax_decode": "GRAPH[llama_layer](type=f16,hd=32,heads=1,n=1,kv=48,p0=47,ff=96,"
                                      "attn=softmax,eps=1e-06,mode=0,n_dims=16,freq_base=500000.0,data=uniform:15)",
    "moe_ffn/q8_0_prefill": "GRAPH[moe_ffn](type=q8_0,d=64,ff=32,e=8,k=2,n=3,data=uniform:16)",
    "attention/gqa_alibi_softcap_sinks_prefill":
        "GRAPH[attention](type=f16,hd=64,heads=8,kv_heads=2,n=7,kv=64,p0=20,max_bias=8.0,softcap=30.0,sinks=True,"
        "data=uniform:17)",
    "attention/f32_decode": "GRAPH[attention](type=f32,hd=80,heads=2,kv_heads=2,n=1,kv=33,p0=32,max_bias=0.0,"
                            "softcap=0.0,sinks=False,data=dense:18)",
    "flash_attention/gqa_alibi_softcap_sinks_prefill":
        "GRAPH[flash_attention](type=f16,hd=64,heads=8,kv_heads=2,n=7,kv=64,p0=20,max_bias=8.0,softcap=30.0,"
        "sinks=True,data=uniform:19)",
    "flash_attention/f32_decode": "GRAPH[flash_attention](type=f32,hd=80,heads=2,kv_heads=2,n=1,kv=33,p0=32,"
                                  "max_bias=0.0,softcap=0.0,sinks=False,data=dense:20)",
    "norm_mul_add/full_wx": "GRAPH[norm_mul_add](type=f32,ne=[64,3,1,1],w=full,b=row,order=wx,eps=1e-05,"
                            "data=uniform:1)",
    "group_norm_mul_add/channel": "GRAPH[group_norm_mul_add](type=f32,ne=[8,2,6,1],n_groups=4,w=channel,b=full,"
                                  "order=xw,eps=1e-06,data=dense:2)",
    "unary_mul/softplus_row": "GRAPH[unary_mul](type=f32,ne=[33,2,1,1],unary=SOFTPLUS,b=row,data=dense:3)",
    "ssm_conv_silu/bias_two_seqs": "GRAPH[ssm_conv_silu](type=f32,d_conv=4,d_inner=7,n_t=3,n_s=2,bias=True,"
                                   "data=dense:4)",
    "topk_moe/softmax_norm_scale_prefill": "GRAPH[topk_moe](type=f32,n_expert=8,k=2,n_tokens=3,gating=softmax,"
                                           "bias=False,norm=True,scale=2.5,data=uniform:1)",
    "topk_moe/sigmoid_bias_decode": "GRAPH[topk_moe](type=f32,n_expert=64,k=6,n_tokens=1,gating=sigmoid,bias=True,"
                                    "norm=False,scale=1.0,data=dense:2)",
    "topk_moe/llama_router_late_softmax_bias": "GRAPH[topk_moe](type=f32,n_expert=6,k=2,n_tokens=7,"
                                               "gating=softmax_weight,bias=True,norm=True,scale=2.5,router=mul_mat,"
                                               "n_embd=16,data=uniform:1)",
    "rms_norm_mul_rope/set_rows_i64_prefill": "GRAPH[rms_norm_mul_rope](type=f32,head_dim=64,n_head=2,n_tokens=3,"
                                              "mode=2,n_dims=32,freq_base=10000.0,eps=1e-06,set_rows=True,n_kv=32,"
                                              "idx=i64,data=uniform:1)",
    "rms_norm_mul_rope/no_cache_decode": "GRAPH[rms_norm_mul_rope](type=f32,head_dim=128,n_head=1,n_tokens=1,mode=0,"
                                         "n_dims=128,freq_base=10000.0,eps=1e-06,set_rows=False,data=dense:5)",
    "rope_set_rows/i32_decode": "GRAPH[rope_set_rows](type=f32,head_dim=128,n_head=1,n_tokens=1,mode=0,n_dims=128,"
                                "freq_base=10000.0,n_kv=64,idx=i32,data=dense:2)",
    "rope_inplace_view/f16_neox": "GRAPH[rope_inplace_view](type=f16,head_dim=64,n_head=2,n_kv=7,n_rot=32,mode=2,"
                                  "freq_base=10000.0,data=uniform:1)",
    "mul_mat_id_mul/f16_shared_row": "GRAPH[mul_mat_id_mul](type=f16,k=64,m=9,n_expert=8,n_used=2,n_tokens=3,"
                                     "src_rows=1,data=uniform:3)",
    "mul_mat_id_mul/f32_row_per_slot": "GRAPH[mul_mat_id_mul](type=f32,k=33,m=5,n_expert=4,n_used=4,n_tokens=1,"
                                       "src_rows=4,data=dense:4)",
    "mul_mat_id_mul/f16_bias": "GRAPH[mul_mat_id_mul](type=f16,k=64,m=9,n_expert=8,n_used=2,n_tokens=3,src_rows=1,"
                               "bias=True,data=uniform:3)",
    "mul_mat_id_mul/f32_bias_without_mul": "GRAPH[mul_mat_id_mul](type=f32,k=33,m=5,n_expert=4,n_used=4,n_tokens=1,"
                                           "src_rows=4,bias=True,mul=False,data=dense:4)",
}


def example(name: str) -> GraphCase:
    """The named example, parsed (KeyError naming the known ones for a name that is not there)."""
    try:
        return parse_graph_id(EXAMPLES[name])
    except KeyError:
        raise KeyError(f"no graph example {name!r}; known: {', '.join(sorted(EXAMPLES))}") from None


def of_pattern(pattern: str) -> list[str]:
    """The names of ``pattern``'s examples."""
    return [n for n in EXAMPLES if n.split("/", 1)[0] == pattern]
