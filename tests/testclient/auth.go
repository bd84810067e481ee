package testclient

import "net/http"

// WithKey returns a client of the same instance that sends token as its
// API key (Authorization: Bearer token); "" sends none.
func (c *Client) WithKey(token string) *Client {
	out := *c
	out.header = http.Header{}
	if token != "" {
		out.header.Set("Authorization", "Bearer "+token)
	}
	return &out
}
