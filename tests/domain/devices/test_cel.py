"""The CEL environment of DRA selectors: Kubernetes' quantity and semver libraries, errors
as non-matches, anything unknown refused up front."""

from __future__ import annotations

import pytest
from kubernetes.utils.quantity import parse_quantity

from provider.domain.devices.cel import CelEnvironment, UnsupportedSelector
from provider.domain.devices.model import Device, Version
from provider.domain.devices.quantity import format_quantity, parse_milli

D = "gpu.nvidia.com"
H100 = Device("gpu-0", ((f"{D}/productName", "NVIDIA H100 80GB HBM3"),
                        (f"{D}/driverVersion", Version.parse("550.54.15")),
                        (f"{D}/index", 3), (f"{D}/mig", False)),
              ((f"{D}/memory", parse_milli("80Gi")),))


@pytest.mark.parametrize("text", ["80Gi", "1.5", "500m", "2e3", "1k", "1M", "0.1Ki", "3",
                                  "12E", ".5", "1e-3"])
def test_quantities_agree_with_the_kubernetes_client(text: str) -> None:
    import math
    assert parse_milli(text) == math.ceil(parse_quantity(text) * 1000)


@pytest.mark.parametrize("text", ["", "Gi", "1.2.3", "5 Gi", "1Zi"])
def test_bad_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_milli(text)


def test_format_quantity() -> None:
    assert [format_quantity(parse_milli(t))
            for t in ("80Gi", "141Gi", "5Mi", "3", "500m", "400G", "1k", "0")] \
        == ["80Gi", "141Gi", "5Mi", "3", "500m", "400G", "1k", "0"]


def test_semver_orders_pre_releases_before_the_release() -> None:
    v = Version.parse
    assert v("1.0.0-alpha").compare(v("1.0.0")) < 0
    assert v("1.0.0-alpha.2").compare(v("1.0.0-alpha.10")) < 0
    assert v("1.0.0+build").compare(v("1.0.0")) == 0
    with pytest.raises(ValueError):
        v("1.0")


@pytest.mark.parametrize(("expr", "want"), [
    (f'device.capacity["{D}"].memory.compareTo(quantity("80Gi")) >= 0', True),
    (f'device.capacity["{D}"].memory.isGreaterThan(quantity("80Gi"))', False),
    (f'device.capacity["{D}"].memory.isLessThan(quantity("81Gi"))', True),
    (f'device.capacity["{D}"].memory.asInteger() == 85899345920', True),
    (f'device.attributes["{D}"].driverVersion.isGreaterThan(semver("535.0.0"))', True),
    (f'device.attributes["{D}"].driverVersion.major() == 550', True),
    (f'device.attributes["{D}"].productName.startsWith("NVIDIA H1")', True),
    (f'device.attributes["{D}"].productName.lowerAscii().contains("h100")', True),
    (f'device.attributes["{D}"].index == 3 && !device.attributes["{D}"].mig', True),
    (f'"{D}" in device.attributes && has(device.attributes["{D}"].index)', True),
    (f'device.driver == "{D}"', True),
    ('device.driver == "other"', False),
])
def test_selectors_over_one_device(expr: str, want: bool) -> None:
    assert CelEnvironment().evaluate(expr, D, H100) is want


def test_a_missing_attribute_is_a_non_match_with_the_error() -> None:
    verdict = CelEnvironment().evaluate(f'device.attributes["{D}"].nvlink == "a"', D, H100)
    assert isinstance(verdict, str) and "nvlink" in verdict


def test_a_comparison_of_mixed_types_is_a_non_match() -> None:
    env = CelEnvironment()
    expr = f'device.attributes["{D}"].driverVersion.compareTo(quantity("1")) > 0'
    assert env.evaluate(expr, D, H100) is not True


@pytest.mark.parametrize("expr", ["device.attributes[", "device.frob()",
                                  'device.capacity["a"].memory.asBinary()'])
def test_unknown_functions_and_syntax_are_unsupported(expr: str) -> None:
    with pytest.raises(UnsupportedSelector) as info:
        CelEnvironment().compile(expr)
    assert info.value.expression == expr


def test_failing_terms_name_values() -> None:
    env = CelEnvironment()
    expr = (f'device.driver == "{D}" && device.capacity["{D}"].memory.compareTo('
            f'quantity("96Gi")) >= 0 && device.attributes["{D}"].index > 5')
    assert env.failing_terms(expr, D, H100) == [
        "memory 80Gi ≥ 96Gi is false",
        f'device.attributes["{D}"].index > 5 is false (index=3)',
    ]


@pytest.mark.parametrize("value", ["80Gi", "1.5", "500m", "2e3", "1k", "0.1Ki", ".5", "96",
                                   "1e-3", "0", 96, 1.5, 0, "12E"])
def test_the_domains_pod_quantities_agree_with_the_config_edges(value: str | int | float) -> None:
    # The config edge uses the kubernetes client's parser; a ProvisioningRequest's pod
    # templates are read in the domain, which may not import it.
    from provider.config.units import quantity_milli as edge
    from provider.domain.devices.quantity import quantity_milli as domain

    assert domain(value) == edge(value)


@pytest.mark.parametrize("value", ["-1", "-500m", -2, "", "Gi", "1.2.3", "1Zi", True, None])
def test_both_parsers_refuse_negative_and_malformed_quantities(value: object) -> None:
    from provider.config.units import quantity_milli as edge
    from provider.domain.devices.quantity import quantity_milli as domain

    with pytest.raises(ValueError) as domain_err:
        domain(value)  # type: ignore[arg-type]
    if value is True:  # the client's parser reads True as 1; a pod spec never holds one
        return
    with pytest.raises(ValueError) as edge_err:
        edge(value)  # type: ignore[arg-type]
    assert str(domain_err.value) == str(edge_err.value)


H200 = Device("gpu-1", ((f"{D}/productName", "NVIDIA H200"), *H100.attributes[1:]),
              H100.capacity)


@pytest.mark.parametrize("expr", [
    f'device.attributes["{D}"]["prod" + "uctName"] == "NVIDIA H200"',
    f'("prod" + "uctName") in device.attributes["{D}"] && '
    f'device.attributes["{D}"].index == 3 && device.attributes["{D}"]["product" + "Name"]'
    f' == "NVIDIA H200"',
    f'device.attributes["{D}"]["prod\\x75ctName"] == "NVIDIA H200"',
])
def test_devices_alike_in_the_names_written_still_differ_in_names_computed(expr: str) -> None:
    """Verdicts are shared between devices that differ only in what a selector cannot read;
    a name it computes or spells with an escape is read too (H100 and H200 differ only in
    productName, which no literal of these selectors names)."""
    env = CelEnvironment()
    assert env.evaluate(expr, D, H100) is not True
    assert env.evaluate(expr, D, H200) is True
