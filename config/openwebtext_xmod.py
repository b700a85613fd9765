# X-MoD at GPT-2-small width on OpenWebText (GPT-2 tokens), for GPUs. A starting point: not yet measured here.
#   pip install 'datasets==3.6.0' && python data/openwebtext/prepare.py
#   torchrun --standalone --nproc_per_node=8 train.py config/openwebtext_xmod.py
# For its FLOP-matched dense partner add --model=dense (same seed: the same batches in the same order).
out_dir = 'out-owt-xmod'
dataset = 'openwebtext'
model = 'xmod'
stride = 4
capacity = 0.125
dense_layers = 12           # FLOP-matched to a 12-layer dense GPT-2 small
n_head = 12
n_embd = 768
block_size = 1024
batch_size = 12
gradient_accumulation_steps = 5 * 8   # global micro-batches per step: ~0.5M tokens per step
max_tokens = 10_000_000_000
learning_rate = 6e-4
min_lr = 6e-5
warmup_iters = 2000
beta2 = 0.95
eval_interval = 1000
eval_tokens = 2 ** 21       # a fixed 2M-token slice of the val split
compile = True
