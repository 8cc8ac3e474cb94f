"""Loading an export of ours into transformers for the check_*_export.py scripts: every tensor must be used
and none missing or of another shape (transformers would otherwise initialise it at random and say so only
in its loading info)."""
import sys


def load_strict(cls, model_dir):
    """cls.from_pretrained(model_dir) with eager attention, in float64 and eval mode; exits naming the
    tensors when transformers reports missing, unexpected or mismatched ones."""
    model, info = cls.from_pretrained(model_dir, attn_implementation="eager", output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        sys.exit(f"{model_dir}: transformers reports {bad}")
    return model.double().eval()
