"""Hugging Face transformers: a small GPT-2 with random weights (nothing is downloaded) generates 16
tokens greedily on the GPU; the same model on the CPU must give the same tokens, and the first step's
logits must agree."""
from fwcheck import check, close, need, passed

torch = need("torch")
transformers = need("transformers")
check(torch.cuda.is_available(), "torch.cuda.is_available() is False")
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
cfg = transformers.GPT2Config(vocab_size=1000, n_positions=128, n_embd=128, n_layer=4, n_head=4)
cpu = transformers.GPT2LMHeadModel(cfg).eval()
gpu = transformers.GPT2LMHeadModel(cfg).eval()
gpu.load_state_dict(cpu.state_dict())
gpu = gpu.cuda()
prompt = torch.randint(0, 1000, (2, 8))
with torch.no_grad():
    want_logits = cpu(prompt).logits[:, -1]
    got_logits = gpu(prompt.cuda()).logits[:, -1].cpu()
    close(got_logits.flatten()[::37].tolist(), want_logits.flatten()[::37].tolist(), 1e-3, "first-step logits")
    want = cpu.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0)
    got = gpu.generate(prompt.cuda(), max_new_tokens=16, do_sample=False, pad_token_id=0).cpu()
check(got.shape == want.shape, "generated shape %s, expected %s" % (tuple(got.shape), tuple(want.shape)))
check(torch.equal(got, want), "greedy generation differs from the CPU's: %s vs %s" % (got.tolist(), want.tolist()))
passed("16 tokens generated greedily, as on the CPU")
