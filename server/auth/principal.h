// Who a call comes from, once authenticated (server/auth/authenticator.h).
#ifndef TURBOKV_SERVER_AUTH_PRINCIPAL_H_
#define TURBOKV_SERVER_AUTH_PRINCIPAL_H_

#include <string>

namespace turbokv::server {

struct Principal {
  // The tenant owning what this caller registers; part of every namespace's identity.
  // "" is the tenant of a server without authentication (every caller shares it).
  std::string tenant;
  // Operators: Stats lists every tenant's namespaces and every namespace can be used and
  // dropped. On a server without authentication every (loopback) caller is admin.
  bool admin = false;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_AUTH_PRINCIPAL_H_
