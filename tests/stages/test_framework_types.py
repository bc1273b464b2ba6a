"""Stage `framework_types`: the framework classes a class of the file derives from
(`framework_bases`) and the types their attributes hold (`attribute_type`, `chain_type`)."""

from __future__ import annotations

from collcheck.static.framework_types import attribute_type, chain_type, framework_bases

from .conftest import catalog, module_of

SNIPPET = """
import lightning
import transformers
class Model(lightning.LightningModule):
    pass
class Tuned(Model):
    pass
class MyTrainer(transformers.Trainer):
    pass
class Plain:
    pass
"""


def test_framework_classes_through_bases_of_the_file() -> None:
    module = module_of(SNIPPET)
    assert framework_bases(module, "Model") == {"lightning.LightningModule"}
    assert framework_bases(module, "Tuned") == {"lightning.LightningModule"}
    assert framework_bases(module, "Plain") == frozenset()
    assert framework_bases(module, "Missing") == frozenset()


def test_catalogued_attribute_types() -> None:
    module = module_of(SNIPPET)
    owners = framework_bases(module, "MyTrainer")
    assert attribute_type(catalog(), owners, "accelerator") == "accelerate.Accelerator"
    assert attribute_type(catalog(), owners, "no_such_attribute") is None
    assert chain_type(catalog(), owners, ["accelerator"]) == "accelerate.Accelerator"
