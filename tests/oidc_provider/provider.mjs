// A real OpenID Connect provider (panva's oidc-provider, OpenID Certified) for zarrchive's
// sign-in tests: tests/helpers/oidc_provider.py starts it on loopback addresses.
//
// Its one argument is a JSON file:
//   {"jwks": {"keys": [<private JWKs>]},
//    "providers": [{"issuer": "http://127.0.0.2:PORT", "host": "127.0.0.2", "port": PORT,
//                   "client": {"client_id", "client_secret", "redirect_uris": [...]}}]}
// Each provider listens on its host and port (its issuer may name a proxy in front of it).
// The development interactions (oidc-provider's own login and consent pages) sign in any
// login with any password: the account's claims derive from the login.  Prints
// "ready <issuer>" for each provider once it listens.
import { readFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));

function account(login) {
  return {
    accountId: login,
    async claims() {
      return {
        sub: login,
        preferred_username: login,
        name: `Test ${login}`,
        email: `${login}@lab.example.org`,
        email_verified: true,
      };
    },
  };
}

for (const spec of config.providers) {
  const provider = new Provider(spec.issuer, {
    clients: [{ ...spec.client, grant_types: ['authorization_code'], response_types: ['code'] }],
    jwks: config.jwks,
    claims: {
      openid: ['sub'],
      profile: ['preferred_username', 'name'],
      email: ['email', 'email_verified'],
    },
    cookies: { keys: ['zarrchive test provider cookie key'] },
    findAccount: async (ctx, sub) => account(sub),
    features: { devInteractions: { enabled: true } },
  });
  provider.on('server_error', (ctx, error) => console.error('server_error', error));
  await new Promise((resolve) => {
    provider.listen(spec.port, spec.host, resolve);
  });
  console.log(`ready ${spec.issuer}`);
}
