"""help() documents every model's constructor: an Args section (as torch.nn.LSTM's docstring
has) naming each argument of ``__init__`` in order, with its default, and the shapes."""

import inspect
import re

import pytest

import mannlab

MODELS = [mannlab.NTM, mannlab.DNC, mannlab.DNTM, mannlab.TARDIS, mannlab.ARMIN, mannlab.LSTM, mannlab.GRU]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_the_class_docstring_documents_every_argument(model):
    doc = inspect.getdoc(model)
    args = doc.split("\nArgs:\n", 1)[1]
    documented = re.findall(r"^    (\w+) \(([^)]*)\): ", args, re.MULTILINE)
    parameters = [p for name, p in inspect.signature(model.__init__).parameters.items() if name != "self"]
    assert [name for name, _ in documented] == [p.name for p in parameters]
    entries = re.split(r"^    (?=\w+ \()", args, flags=re.MULTILINE)[1:]
    for parameter, entry in zip(parameters, entries):
        if parameter.default is not inspect.Parameter.empty:
            shown = f'"{parameter.default}"' if isinstance(parameter.default, str) else str(parameter.default)
            assert f"Default: {shown}" in " ".join(entry.split()), (model.__name__, parameter.name)
    assert "Shapes" in doc and "(B, T, input_size)" in doc
