"""Expressibility sweep (modernjobs, 2026-12-06): jobs a capacity planner plans today, each run
through ``dpsim predict --json``; prints MFU, step, tokens/s per GPU, memory per GPU and the fits
verdict, or the one-line refusal. Only dpsim's own predictions: no published number is read.
Results and notes: validation/large_model_runs.md, "Expressibility sweep (modernjobs, 2026-12-06)".

    python validation/expressibility_sweep.py            # every job (a few minutes)
    python validation/expressibility_sweep.py J09 J17c   # some of them
"""
import json, os, shlex, subprocess, sys
IB = "--link infiniband"
L = "--seq-len"
G175 = "transformer:hidden=12288,layers=96,heads=96,ffn=49152,vocab=51200,seq=2048,act=gelu,norm=layernorm,pos=learned,dropout=0,name=gpt3-175b"
# Nemotron-4's own block (shapes, 2026-12-06): LayerNorm, squared ReLU (two matrices of 4h), RoPE, GQA, no biases.
NEMO340 = "transformer:hidden=18432,layers=96,heads=96,kv_heads=8,ffn=73728,vocab=256000,seq=4096,act=relu2,norm=layernorm,pos=rope,name=nemotron-4-340b"
NEMO15 = "transformer:hidden=6144,layers=32,heads=48,kv_heads=8,ffn=24576,vocab=256000,seq=4096,act=relu2,norm=layernorm,pos=rope,name=nemotron-4-15b"
BLOOM = "transformer:hidden=14336,layers=70,heads=112,vocab=250880,seq=2048,act=gelu,norm=layernorm,pos=alibi,tied=true,embed_norm=true,dropout=0,name=bloom-176b"
OPT = "transformer:hidden=12288,layers=96,heads=96,vocab=50272,seq=2048,act=relu,norm=layernorm,pos=learned,positions=2050,tied=true,dropout=0.1,name=opt-175b"
FS2 = "--strategy fsdp --fsdp-version 2 --precision bf16-params"
MEG = "--precision bf16-fp32-grads --strategy zero1 --sequence-parallel --activations megatron --attention-kernel cudnn"
JOBS = [
 ("J01 Llama-3-8B FSDP2 8xH100 compile op-SAC", f"--model llama-3-8b --gpus 8 {IB} {FS2} --micro-batch 1 --global-batch 8 --compile --recompute op"),
 ("J02 Llama-3-8B FSDP2 8xH100 compile selective", f"--model llama-3-8b --gpus 8 {IB} {FS2} --micro-batch 1 --global-batch 8 --compile --recompute selective"),
 ("J03 Llama-3-8B FSDP2 8xH100 compile float8 tensorwise full AC", f"--model llama-3-8b --gpus 8 {IB} {FS2} --micro-batch 1 --global-batch 8 --compile --fp8 torchao-tensorwise --recompute full"),
 ("J04 Llama-3-8B FSDP2 8xH100 compile float8 rowwise full AC", f"--model llama-3-8b --gpus 8 {IB} {FS2} --micro-batch 1 --global-batch 8 --compile --fp8 torchao-rowwise --recompute full"),
 ("J05 Llama-3-8B FSDP2 128xH100 full AC mb2", f"--model llama-3-8b --gpus 128 {IB} {FS2} --micro-batch 2 --global-batch 256 --compile --recompute full"),
 ("J06 Llama-3-8B FSDP2 8xB200 compile", f"--model llama-3-8b --gpus 8 --link dgx-b200 {FS2} --micro-batch 2 --global-batch 16 --compile --recompute op"),
 ("J07 Llama-3-8B FSDP2 8xB200 MXFP8 compile", f"--model llama-3-8b --gpus 8 --link dgx-b200 {FS2} --micro-batch 2 --global-batch 16 --compile --fp8 mxfp8 --recompute op"),
 ("J08 Llama-3-8B 128K CP8 8xH100 FSDP2 full AC", f"--model llama-3-8b {L} 131072 --gpus 8 {IB} --strategy fsdp --precision bf16-params --cp 8 --micro-batch 1 --global-batch 1 --compile --recompute full"),
 ("J09 Llama-3-70B FSDP2 64xH100 full AC mb1", f"--model llama-3-70b --gpus 64 {IB} {FS2} --micro-batch 1 --global-batch 64 --compile --recompute full"),
 ("J10 Llama-3-70B FSDP2 64xH100 full AC float8", f"--model llama-3-70b --gpus 64 {IB} {FS2} --micro-batch 1 --global-batch 64 --compile --fp8 torchao-tensorwise --recompute full"),
 ("J11 Llama-3-70B HSDP 128xH100 full AC", f"--model llama-3-70b --gpus 128 {IB} --strategy fsdp-hybrid --precision bf16-params --micro-batch 1 --global-batch 128 --recompute full"),
 ("J11b Llama-3-70B HSDP shard 64 128xH100 full AC", f"--model llama-3-70b --gpus 128 {IB} --strategy fsdp-hybrid --precision bf16-params --micro-batch 1 --global-batch 128 --recompute full --zero-group 64"),
 ("J11c Llama-3-70B HSDP shard 32 128xH100 full AC", f"--model llama-3-70b --gpus 128 {IB} --strategy fsdp-hybrid --precision bf16-params --micro-batch 1 --global-batch 128 --recompute full --zero-group 32"),
 ("J12 Llama-3-70B FSDP+TP8 async 256xH100 compile fp8", f"--model llama-3-70b --gpus 256 {IB} --strategy fsdp --precision bf16-params --tp 8 --sequence-parallel --tp-comm-overlap async --micro-batch 1 --global-batch 256 --compile --fp8 torchao-rowwise --recompute full"),
 ("J13 Llama-3-70B FSDP2 64xH200 op-SAC", f"--model llama-3-70b --gpus 64 {IB} --gpu h200 {FS2} --micro-batch 1 --global-batch 64 --compile --recompute op"),
 ("J14 Llama-3-70B FSDP2 72xGB200 NVL72", f"--model llama-3-70b --gpus 72 --link gb200-nvl72 {FS2} --micro-batch 1 --global-batch 72 --compile --recompute op"),
 ("J15 Llama-3-70B Megatron tp4 pp4 vpp5 cp2 TE-FP8 1024xH100", f"--model llama-3-70b --gpus 1024 {IB} --tp 4 --pp 4 --cp 2 --schedule 1f1b-interleaved --virtual-stages 5 {MEG} --micro-batch 1 --global-batch 512 --fp8 te-current --tp-comm-overlap full"),
 ("J16 Llama-3-70B Megatron tp8 pp1 bf16 1024xH100", f"--model llama-3-70b --gpus 1024 {IB} --tp 8 {MEG} --micro-batch 1 --global-batch 1024 --recompute selective"),
 ("J17 Llama-3-405B tp8 pp16 dp128 16384xH100 bf16", f"--model llama-3-405b --gpus 16384 {IB} --tp 8 --pp 16 --schedule 1f1b-interleaved --virtual-stages 8 {MEG} --micro-batch 1 --global-batch 2048 --tp-comm-overlap full"),
 ("J18 Llama-3-405B tp8 pp16 cp16 128K 16384xH100", f"--model llama-3-405b {L} 131072 --gpus 16384 {IB} --tp 8 --pp 16 --cp 16 --schedule 1f1b-interleaved --virtual-stages 8 {MEG} --micro-batch 1 --global-batch 128 --recompute full --tp-comm-overlap full"),
 ("J19 Llama-3-405B FSDP+TP8+PP8 512xH100 float8 rowwise", f"--model llama-3-405b --gpus 512 {IB} --strategy fsdp --precision bf16-params --tp 8 --pp 8 --sequence-parallel --micro-batch 1 --global-batch 256 --schedule 1f1b-interleaved --virtual-stages 2 --compile --fp8 torchao-rowwise --recompute full --tp-comm-overlap async"),
 ("J20 Llama-3-405B tp8 pp8 512xB200 MXFP8", f"--model llama-3-405b --gpus 512 --link dgx-b200 --tp 8 --pp 8 --schedule 1f1b-interleaved --virtual-stages 4 {MEG} --micro-batch 1 --global-batch 256 --fp8 mxfp8 --tp-comm-overlap full --recompute selective"),
 ("J21 GPT-3 175B tp8 pp8 vpp zero1 TE-delayed 1024xH100", f"--model {G175} --gpus 1024 {IB} --tp 8 --pp 8 --schedule 1f1b-interleaved --virtual-stages 6 --strategy zero1 --precision bf16-fp32-grads --sequence-parallel --micro-batch 1 --global-batch 2048 --fp8 te-delayed --tp-comm-overlap full"),
 ("J22 GPT-3 175B tp4 pp8 te-current 512xH100", f"--model {G175} --gpus 512 {IB} --tp 4 --pp 8 --schedule 1f1b-interleaved --virtual-stages 12 --strategy zero1 --precision bf16-fp32-grads --sequence-parallel --micro-batch 1 --global-batch 2048 --fp8 te-current --tp-comm-overlap full"),
 ("J23 GPT-3 175B tp4 pp4 MXFP8 512xB200", f"--model {G175} --gpus 512 --link dgx-b200 --tp 4 --pp 4 --schedule 1f1b-interleaved --virtual-stages 12 --strategy zero1 --precision bf16-fp32-grads --sequence-parallel --micro-batch 2 --global-batch 2048 --fp8 mxfp8 --tp-comm-overlap full"),
 ("J24 GPT-3 175B tp8 pp8 bf16 1024xH100", f"--model {G175} --gpus 1024 {IB} --tp 8 --pp 8 --schedule 1f1b-interleaved --virtual-stages 6 --strategy zero1 --precision bf16-fp32-grads --sequence-parallel --micro-batch 1 --global-batch 2048 --tp-comm-overlap full"),
 ("J25 Nemotron-4 340B tp8 pp12 768xH100 fp8", f"--model {NEMO340} --gpus 768 {IB} --tp 8 --pp 12 --schedule 1f1b-interleaved --virtual-stages 8 --strategy zero1 --precision bf16-fp32-grads --sequence-parallel --micro-batch 1 --global-batch 768 --fp8 te-delayed --tp-comm-overlap full"),
 ("J26 Nemotron-4 15B tp2 256xH100 bf16", f"--model {NEMO15} --gpus 256 {IB} --tp 2 --strategy zero1 --precision bf16-fp32-grads --sequence-parallel --micro-batch 1 --global-batch 512"),
 # Nemotron-4's block (LayerNorm + squared ReLU + RoPE + GQA) is not a modelled block: the same
 # parameters and FLOPs as a SwiGLU block of two thirds the width (2 x h x f = 3 x h x 2f/3).
 ("J25e Nemotron-4 340B as SwiGLU-equivalent tp8 pp12 768xH100 fp8", "--model transformer:hidden=18432,layers=96,heads=96,kv_heads=8,ffn=49152,vocab=256000,seq=4096,name=nemotron4-340b-swiglu-equiv --gpus 768 --link infiniband --tp 8 --pp 12 --schedule 1f1b-interleaved --virtual-stages 8 --strategy zero1 --precision bf16-fp32-grads --sequence-parallel --micro-batch 1 --global-batch 768 --fp8 te-delayed --tp-comm-overlap full"),
 ("J26e Nemotron-4 15B as SwiGLU-equivalent tp2 256xH100 bf16", "--model transformer:hidden=6144,layers=32,heads=48,kv_heads=8,ffn=16384,vocab=256000,seq=4096,name=nemotron4-15b-swiglu-equiv --gpus 256 --link infiniband --tp 2 --strategy zero1 --precision bf16-fp32-grads --sequence-parallel --micro-batch 1 --global-batch 512 --tp-comm-overlap full"),
 ("J27 BLOOM-176B tp4 pp12 384xA100", f"--model {BLOOM} --gpus 384 --link dgx-a100 --tp 4 --pp 12 --strategy zero1 --micro-batch 2 --global-batch 2048 --recompute full --precision amp-bf16"),
 ("J28 OPT-175B FSDP+TP8 1024xA100 mb8", f"--model {OPT} --gpus 1024 --link dgx-a100 --strategy fsdp --tp 8 --micro-batch 8 --global-batch 1024 --recompute full --precision fp16-params"),
 ("J29 Mixtral-8x7B ep8 tp1 pp4 64xH100 bf16", f"--model mixtral-8x7b --gpus 64 {IB} --ep 8 --pp 4 --strategy zero1 --precision bf16-fp32-grads --micro-batch 1 --global-batch 256 --recompute selective"),
 ("J30 Mixtral-8x7B FSDP2+EP8 64xH100", f"--model mixtral-8x7b --gpus 64 {IB} --strategy fsdp --precision bf16-params --ep 8 --micro-batch 1 --global-batch 64 --recompute full"),
 ("J31 Mixtral-8x22B tp2 pp8 ep8 256xH100 fp8", f"--model mixtral-8x22b --gpus 256 {IB} --tp 2 --pp 8 --ep 8 --sequence-parallel --strategy zero1 --precision bf16-fp32-grads --micro-batch 1 --global-batch 256 --fp8 te-delayed --recompute selective"),
 ("J32 DeepSeek-V3 pp16 ep64 DualPipe 2048xH800 blockwise", f"--model deepseek-v3 --gpus 2048 {IB} --gpu h800 --pp 16 --ep 64 --schedule dualpipe --strategy zero1 --precision bf16-fp32-grads-bf16-moments --micro-batch 1 --global-batch 15360 --fp8 deepseek-blockwise --mtp-depth 1 --moe-node-limit 4 --moe-a2a hierarchical --moe-a2a-overlap --recompute full"),
 ("J33 DeepSeek-V3 pp8 ep32 512xB200 MXFP8", "--model deepseek-v3 --gpus 512 --link dgx-b200 --pp 8 --ep 32 --schedule 1f1b-interleaved --virtual-stages 2 --strategy zero1 --precision bf16-fp32-grads --micro-batch 1 --global-batch 4096 --fp8 mxfp8 --recompute full"),
 ("J34 Qwen3-30B-A3B FSDP2+EP8 8xH100 compile", f"--model qwen3-30b-a3b --gpus 8 {IB} --strategy fsdp --precision bf16-params --ep 8 --micro-batch 1 --global-batch 8 --compile --recompute full"),
 ("J35 Qwen3-235B-A22B tp2 pp8 ep16 256xH200", f"--model qwen3-235b-a22b --gpus 256 {IB} --gpu h200 --tp 2 --pp 8 --ep 16 --sequence-parallel --strategy zero1 --precision bf16-fp32-grads --micro-batch 1 --global-batch 1024 --recompute selective"),
 ("J36 Qwen3-235B-A22B pp4 ep32 256xGB200 MXFP8", "--model qwen3-235b-a22b --gpus 256 --link gb200-nvl72 --pp 4 --ep 32 --strategy zero1 --precision bf16-fp32-grads --micro-batch 1 --global-batch 1024 --fp8 mxfp8 --recompute selective"),
 ("J37 Llama-2-7B FSDP 8xA100 bf16", "--model llama-2-7b --gpus 8 --link dgx-a100 --strategy fsdp --micro-batch 2 --global-batch 16 --recompute full"),
 ("J38 Llama-3.2-1B-shape FSDP2 8xH100", f"--model transformer:hidden=2048,layers=16,heads=32,kv_heads=8,ffn=8192,vocab=128256,seq=8192,tied=true,name=llama-3.2-1b --gpus 8 {IB} {FS2} --micro-batch 4 --global-batch 32 --compile"),
 ("J39 Llama-3.2-3B-shape DDP 8xH100", f"--model transformer:hidden=3072,layers=28,heads=24,kv_heads=8,ffn=8192,vocab=128256,seq=8192,tied=true,name=llama-3.2-3b --gpus 8 {IB} --strategy ddp --micro-batch 2 --global-batch 16 --recompute full"),
 ("J40 Mistral-7B (LlamaConfig) FSDP2 8xH100", f"--model transformers:MistralConfig(max_position_embeddings=4096) --gpus 8 {IB} {FS2} --micro-batch 2 --global-batch 16 --compile --recompute op"),
 ("J41 Qwen2.5-7B config FSDP2 8xH100", f"--model transformers:Qwen2Config(hidden_size=3584,intermediate_size=18944,num_hidden_layers=28,num_attention_heads=28,num_key_value_heads=4,vocab_size=152064,max_position_embeddings=4096) --gpus 8 {IB} {FS2} --micro-batch 2 --global-batch 16 --recompute full"),
 ("J42 Llama-3-8B DDP ZeRO-1 16xH100 bf16", f"--model llama-3-8b --gpus 16 {IB} --strategy zero1 --precision bf16-params --micro-batch 1 --global-batch 64 --recompute full"),
 ("J44 Llama-3-70B FSDP2 amp-bf16 (autocast) 64xH100 full AC", f"--model llama-3-70b --gpus 64 {IB} --strategy fsdp --fsdp-version 2 --micro-batch 1 --global-batch 64 --compile --recompute full"),
 ("J17b Llama-3-405B tp8 pp16 1F1B selective 16384xH100", f"--model llama-3-405b --gpus 16384 {IB} --tp 8 --pp 16 {MEG} --micro-batch 1 --global-batch 2048 --tp-comm-overlap full --recompute selective"),
 ("J17c Llama-3-405B tp8 pp16 vpp8 full AC 16384xH100", f"--model llama-3-405b --gpus 16384 {IB} --tp 8 --pp 16 --schedule 1f1b-interleaved --virtual-stages 8 {MEG} --micro-batch 1 --global-batch 2048 --tp-comm-overlap full --recompute full"),
 ("J45 Llama-3-70B FSDP2 amp-bf16 (autocast) 64xH100 no AC", f"--model llama-3-70b --gpus 64 {IB} --strategy fsdp --fsdp-version 2 --micro-batch 1 --global-batch 64"),
 ("J46 Llama-3-8B DDP 8xH100 bf16-params mb1 full AC", f"--model llama-3-8b --gpus 8 {IB} --strategy ddp --precision bf16-params --micro-batch 1 --global-batch 32 --recompute full"),
 ("J47 Llama-3-8B FSDP2 1024xH100 HSDP", f"--model llama-3-8b --gpus 1024 {IB} --strategy fsdp-hybrid --precision bf16-params --micro-batch 2 --global-batch 2048 --recompute op"),
 ("J48 Llama-3-70B FSDP2 8xB200 MXFP8 full AC", f"--model llama-3-70b --gpus 8 --link dgx-b200 {FS2} --micro-batch 1 --global-batch 8 --compile --fp8 mxfp8 --recompute full"),
 ("J43 Llama-3-8B config.json FSDP2 8xH100", f"--model examples/Llama-3.1-8B/config.json --seq-len 8192 --gpus 8 {IB} {FS2} --micro-batch 1 --global-batch 8 --recompute op"),
]
def run(name, args, cmd="predict"):
    a = ["dpsim", cmd] + shlex.split(args) + ["--json"]
    p = subprocess.run(a, capture_output=True, text=True)
    if p.returncode != 0:
        err = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"name": name, "ok": False, "err": err[:400], "trace": "Traceback" in p.stderr}
    d = json.loads(p.stdout)
    m = d.get("memory") or {}
    warns = (d.get("provenance") or {}).get("warnings") or []
    return {"name": name, "ok": True, "mfu": d.get("mfu"), "step": d.get("step_time_s"), "tok_s_gpu": d["tokens_per_s"] / d["n_gpus"],
            "fits": m.get("fits"), "mem_gib": (m.get("total_bytes") or 0) / 2**30, "cap_gib": (m.get("usable_bytes") or 0) / 2**30,
            "exposed": d.get("exposed_comm_s"), "warn": warns}
if __name__ == "__main__":
    only = sys.argv[1:]
    out = []
    for n, a in JOBS:
        if only and n.split()[0] not in only: continue
        r = run(n, a)
        out.append(r)
        if r["ok"]:
            print(f"{n:62s} mfu {r['mfu']*100:5.1f}% step {r['step']:8.3f}s tok/s/gpu {r['tok_s_gpu']:8.0f} mem {r['mem_gib']:6.1f}/{r['cap_gib']:5.1f} fits={r['fits']} warn={len(r['warn'])}", flush=True)
        else:
            print(f"{n:62s} FAIL trace={r['trace']} {r['err']}", flush=True)
    if os.environ.get("DPSIM_SWEEP_JSON"):
        with open(os.environ["DPSIM_SWEEP_JSON"], "w") as f:
            json.dump(out, f, indent=1)
