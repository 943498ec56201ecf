"""A real OpenLDAP ``slapd`` (Debian's package) for the LDAP login tests: its own slapd.conf and
MDB database in a temporary folder, the directory below loaded with ``slapadd``, listening on a free
port of 127.0.0.1 until :meth:`Slapd.stop` kills its process group."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools.seaweedfs import free_port
from tests.security.sso_support.processes import spawn, stop

SUFFIX = "dc=lakewarden,dc=test"
ADMIN_DN = f"cn=admin,{SUFFIX}"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
# uid -> the directory groups (groupOfNames) it is a member of
USERS = {
    "vera": ["lw-viewers"],
    "otto": ["lw-viewers", "lw-operators"],
    "oscar": ["lw-viewers", "lw-operators"],  # groupOfNames needs a member: the tests take otto out
    "alma": ["lw-admins", "staff"],
    "nils": ["staff"],
}
GROUP_NAMES = ("lw-viewers", "lw-operators", "lw-admins", "staff")


def slapd_binary() -> str | None:
    return shutil.which("slapd") or next((p for p in ("/usr/sbin/slapd",) if Path(p).exists()), None)


def group_dn(name: str) -> str:
    return f"cn={name},{GROUPS}"


def _config(folder: Path, admin_password: str) -> str:
    schemas = "\n".join(
        f"include /etc/ldap/schema/{name}.schema" for name in ("core", "cosine", "inetorgperson", "nis")
    )
    return f"""{schemas}
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {folder}/slapd.pid
database mdb
maxsize 16777216
suffix "{SUFFIX}"
rootdn "{ADMIN_DN}"
rootpw {admin_password}
directory {folder}/data
access to attrs=userPassword by anonymous auth by * none
access to * by * read
"""


def _entries(user_password: str) -> str:
    blocks = [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: lakewarden\no: Lakewarden tests",
        f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people",
        f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups",
    ]
    for uid in USERS:
        blocks.append(
            f"dn: uid={uid},{PEOPLE}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid.title()} Tester\n"
            f"sn: Tester\ngivenName: {uid.title()}\nmail: {uid}@example.org\nuserPassword: {user_password}"
        )
    for name in GROUP_NAMES:
        members = "\n".join(f"member: uid={uid},{PEOPLE}" for uid, groups in USERS.items() if name in groups)
        blocks.append(f"dn: {group_dn(name)}\nobjectClass: groupOfNames\ncn: {name}\n{members}")
    return "\n\n".join(blocks) + "\n"


@dataclass
class Slapd:
    folder: Path
    user_password: str = "directory-pass-1"
    admin_password: str = "directory-admin-1"
    port: int = 0
    child: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def uri(self) -> str:
        return f"ldap://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        binary = slapd_binary()
        (self.folder / "data").mkdir(parents=True)
        config = self.folder / "slapd.conf"
        config.write_text(_config(self.folder, self.admin_password))
        (self.folder / "entries.ldif").write_text(_entries(self.user_password))
        subprocess.run(
            [
                binary.replace("slapd", "slapadd"),
                "-q",
                "-f",
                str(config),
                "-l",
                str(self.folder / "entries.ldif"),
            ],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        self.port = free_port()
        log = self.folder / "slapd.log"
        # -d 0: stay in the foreground (so the process group is ours to stop), no debug output.
        self.child = spawn([binary, "-f", str(config), "-h", f"{self.uri}/", "-d", "0"], log=log)
        self._wait_until_bound(timeout, log)

    def _wait_until_bound(self, timeout: float, log: Path) -> None:
        import ldap

        deadline = time.monotonic() + timeout
        while True:
            try:
                connection = ldap.initialize(self.uri)
                connection.set_option(ldap.OPT_NETWORK_TIMEOUT, 2)
                connection.simple_bind_s(ADMIN_DN, self.admin_password)
                connection.unbind_s()
                return
            except ldap.SERVER_DOWN:
                if self.child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"slapd did not start (exit {self.child.poll()}):\n{log.read_text()}"
                    ) from None
                time.sleep(0.05)  # polling for the listener, not waiting on a guess

    def stop(self) -> None:
        if self.child is not None:
            stop(self.child)
