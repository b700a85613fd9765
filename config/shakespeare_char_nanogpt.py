# The nanoGPT-comparable dense baseline on char-level Shakespeare: the shape and recipe of nanoGPT's CPU run of
# shakespeare_char (4 layers, 4 heads, 128 wide, context 64, batch 12, 2000 iterations, lr 1e-3, no dropout).
#   python train.py config/shakespeare_char_nanogpt.py
#   python train.py config/shakespeare_char_nanogpt.py --model=xmod   # X-MoD FLOP-matched to this dense model
# Our data differs from nanoGPT's tiny-shakespeare (the complete works in modern spelling, whole plays held out for
# validation), and so does our backbone (RoPE, RMSNorm), so its loss is comparable in kind, not identical.
out_dir = 'out-shakespeare-char-nanogpt'
model = 'dense'
dense_layers = 4            # the dense depth; a sparse --model is FLOP-matched to it (n_layer stays auto)
n_head = 4
n_embd = 128
block_size = 64
batch_size = 12
max_iters = 2000
learning_rate = 1e-3
dropout = 0.0
