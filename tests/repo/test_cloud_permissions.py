"""The cloud permissions of the overlays against the cloud calls the adapters make: the
AWS IAM policy allows exactly the adapter's EC2 actions and scopes every write to this
cluster's tag; the GCP custom role holds exactly the permissions of the adapter's Compute
calls and of a bulkInsert from an instance template."""

from __future__ import annotations

import json
import re

import yaml

from tests.kit.deploy import DEPLOY, IDENTITIES, ROOT

# boto3 client methods that are not EC2 API calls.
_BOTO_LOCAL = {"close", "get_paginator", "can_paginate", "get_waiter", "meta"}


def _aws_calls() -> set[str]:
    """EC2 API actions the AWS adapter calls, from its boto3 client calls."""
    methods: set[str] = set()
    for path in (ROOT / "adapters" / "aws").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        methods |= set(re.findall(r"(?:_ec2\.(?:reads|launches)|\bclient)\.([a-z_]+)\b", text))
    return {"ec2:" + "".join(w.capitalize() for w in m.split("_"))
            for m in methods - _BOTO_LOCAL}


def test_aws_iam_policy_allows_the_adapters_calls_and_scopes_writes_to_the_cluster() -> None:
    policy = json.loads((DEPLOY / "overlays" / "aws" / "iam-policy.json").read_text())
    config = yaml.safe_load((ROOT / "deploy" / "examples" / "aws.yaml").read_text())
    cluster, region = config["cluster"], config["cloud"]["aws"]["region"]
    statements = policy["Statement"]
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str)
                                               else s["Action"])}
    assert {a for a in actions if a.startswith("ec2:")} == _aws_calls()
    assert actions - _aws_calls() == {"iam:PassRole"}
    for s in statements:
        assert s["Effect"] == "Allow"
        resources = [s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"]
        acts = [s["Action"]] if isinstance(s["Action"], str) else s["Action"]
        if resources == ["*"]:
            assert all(a.startswith("ec2:Describe") for a in acts), s["Sid"]
            continue
        for arn in resources:
            assert arn.startswith(("arn:aws:iam::", f"arn:aws:ec2:{region}:")), arn
        conditions_ = json.dumps(s.get("Condition", {}))
        tagged = f'"aws:RequestTag/allset.dev/cluster": "{cluster}"' in conditions_ or \
            f'"aws:ResourceTag/allset.dev/cluster": "{cluster}"' in conditions_
        if acts in (["ec2:TerminateInstances"], ["ec2:CreateTags"]):
            assert tagged, s["Sid"]
        if acts == ["ec2:RunInstances"]:
            # Instances (and their volumes) only with this cluster's tag; the other
            # resources a launch touches (template, image, subnet...) carry no tag.
            owned = {"instance", "volume"} & {a.split(":")[5].split("/")[0] for a in resources}
            assert tagged if owned else not owned, s["Sid"]
    # The tag allset writes is the tag the policy checks.
    from adapters.aws import tags
    assert tags.CLUSTER == "allset.dev/cluster"
    # After launch allset writes two tags only: the commit and the deletion mark.
    after_launch = [s for s in statements if s["Action"] == "ec2:CreateTags"
                    and "ec2:CreateAction" not in json.dumps(s.get("Condition", {}))]
    assert [set(s["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"])
            for s in after_launch] == [{tags.COMMITTED, tags.DELETING}]


# Compute API method -> the IAM permissions it needs. A new call in adapters/gcp/ fails
# test_gcp_custom_role_... until it is added here and to custom-role.yaml.
GCP_CALLS = {
    "instances.aggregated_list": {"compute.instances.list"},
    "instances.list": {"compute.instances.list"},
    "instances.get": {"compute.instances.get"},
    "instances.bulk_insert_unary": {"compute.instances.create", "compute.instances.setLabels"},
    "instances.set_labels_unary": {"compute.instances.setLabels"},
    "instances.delete_unary": {"compute.instances.delete"},
    "reservations.aggregated_list": {"compute.reservations.list"},
    "reservations.get": {"compute.reservations.get"},
    "future_reservations.aggregated_list": {"compute.futureReservations.list"},
    "instance_templates.get": {"compute.instanceTemplates.get"},
    "machine_types.get": {"compute.machineTypes.get"},
    "regions.get": {"compute.regions.get"},
    "zone_operations.wait": {"compute.zoneOperations.get"},
}
# What bulkInsert from an instance template needs besides compute.instances.create.
GCP_TEMPLATE = {
    "compute.instanceTemplates.useReadOnly", "compute.disks.create", "compute.images.useReadOnly",
    "compute.subnetworks.use", "compute.instances.setMetadata", "compute.instances.setTags",
    "compute.instances.setServiceAccount", "compute.resourcePolicies.use",
}


def _gcp_calls() -> set[str]:
    client_of = {"_instances": "instances", "_client": "zone_operations"}
    found: set[str] = set()
    for path in (ROOT / "adapters" / "gcp").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        for client, method in re.findall(r"self\._c\.([a-z_]+)\.([a-z_]+)\(", text):
            found.add(f"{client}.{method}")
        for attr, method in re.findall(r"self\.(_instances|_client)\.([a-z_]+)\(", text):
            found.add(f"{client_of[attr]}.{method}")
    return found


def test_gcp_custom_role_has_exactly_the_adapters_permissions() -> None:
    assert _gcp_calls() == set(GCP_CALLS)
    role = yaml.safe_load((DEPLOY / "overlays" / "gcp" / "custom-role.yaml").read_text())
    needed = set().union(*GCP_CALLS.values()) | GCP_TEMPLATE
    assert set(role["includedPermissions"]) == needed
    assert len(role["includedPermissions"]) == len(needed)
    assert role["stage"] == "GA"


def test_cloud_identities_name_the_configs_account() -> None:
    """The identities the guide's overlays set (tests.kit.deploy.IDENTITIES) belong to the
    examples' project and account."""
    gcp = yaml.safe_load((ROOT / "deploy" / "examples" / "gcp.yaml").read_text())
    email = IDENTITIES["gcp"][2]
    assert email.endswith(f"@{gcp['cloud']['gcp']['project']}.iam.gserviceaccount.com")
    arn = IDENTITIES["aws"][2]
    policy = json.loads((DEPLOY / "overlays" / "aws" / "iam-policy.json").read_text())
    account = arn.split(":")[4]
    assert all(f":{account}:" in a or "::image/" in a or "::snapshot/" in a or a == "*"
               for s in policy["Statement"]
               for a in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"]))
