import pytest
import torch

from pathweave import load_model
from pathweave.errors import InputError, UnknownModelError


def test_hf_model_type_builds_offline_with_random_weights() -> None:
    pytest.importorskip("transformers")
    loaded = load_model("hf:bert", small=True)
    assert loaded.name == "hf:bert" and loaded.inputs[0].shape == (1, 16)
    assert loaded.inputs[0].dtype == torch.int64
    with torch.no_grad():
        out = loaded.model(*loaded.inputs)
    assert out.last_hidden_state.shape == (1, 16, 768)


def test_hf_unknown_config_is_refused_without_download() -> None:
    pytest.importorskip("transformers")
    with pytest.raises(UnknownModelError, match="neither a transformers model type"):
        load_model("hf:surely-not-a-model-type")


def test_bad_model_arguments() -> None:
    with pytest.raises(InputError, match="batch must be >= 1"):
        load_model("googlenet", batch=0)
    with pytest.raises(UnknownModelError, match="no such model file"):
        load_model("missing.pt2")
    with pytest.raises(UnknownModelError, match="unknown zoo model 'nope'"):
        load_model("nope")
