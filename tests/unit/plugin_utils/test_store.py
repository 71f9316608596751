"""plugin_utils/store.py: the GCS store's settings checked before they reach redis.conf or a unit file."""

import pytest

from plugin_utils import store

GOOD = {"bind": "198.18.0.254", "port": 6380, "dir": "/var/lib/ray-verl-store",
        "config_path": "/etc/ray-verl/store.conf", "namespace": "ray-verl-198-18-0-10-6379", "user": "redis",
        "service": "ray-verl-store", "appendfsync": "everysec"}


def test_good_settings_pass_normalised():
    out = store.settle(dict(GOOD, port="6380"))
    assert out["port"] == 6380 and out["bind"] == "198.18.0.254"


@pytest.mark.parametrize("field, value, setting", [
    ("bind", "0.0.0.0", "ray_store_bind"),
    ("bind", "store.example\nrename-command CONFIG x", "ray_store_bind"),
    ("port", 70000, "ray_store_port"),
    ("port", "63 80", "ray_store_port"),
    ("dir", "/var/lib/x\ndir /etc", "ray_store_dir"),
    ("dir", "/var/../etc", "ray_store_dir"),
    ("config_path", "relative.conf", "ray_store_config_path"),
    ("namespace", "a@b", "ray_store_namespace"),
    ("user", "root;x", "ray_store_user"),
    ("service", "-x", "ray_store_service_name"),
    ("appendfsync", "sometimes", "ray_store_appendfsync"),
])
def test_a_bad_setting_is_one_line_naming_it_not_its_value(field, value, setting):
    with pytest.raises(store.StoreSettingError) as exc:
        store.settle(dict(GOOD, **{field: value}))
    assert str(exc.value).startswith(f"{setting}: ") and "\n" not in str(exc.value)
    assert str(value) not in str(exc.value)


@pytest.mark.parametrize("text", ["short", "a" * 20 + "\nrequirepass x", "pass word with spaces!!", ""])
def test_an_unfit_password_is_refused_without_quoting_it(text):
    with pytest.raises(store.StoreSettingError) as exc:
        store.check_password(text)
    assert (text.strip() or "\0") not in str(exc.value)


def test_the_made_password_passes_and_the_namespace_is_one_per_head():
    assert store.check_password("0123456789abcdef" * 4 + "\n") == "0123456789abcdef" * 4
    assert store.namespace_for("198.18.0.10", 6379) == "ray-verl-198-18-0-10-6379"
    store.settle(dict(GOOD, namespace=store.namespace_for("head-1.example.org", 6379)))
