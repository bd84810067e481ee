package http

import (
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/apikey"
)

// KeyJSON is the API key object of the admin API. The token is never part
// of it: it exists only in the answer that created the key.
type KeyJSON struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Scopes       []string   `json:"scopes"`
	Queues       []string   `json:"queues"`
	WorkerPrefix *string    `json:"worker_prefix"`
	CreatedAt    time.Time  `json:"created_at"`
	LastUsedAt   *time.Time `json:"last_used_at"`
	ExpiresAt    *time.Time `json:"expires_at"`
	RevokedAt    *time.Time `json:"revoked_at"`
}

// CreatedKeyJSON is a new key with its token ("key"), shown this once.
type CreatedKeyJSON struct {
	KeyJSON
	Key string `json:"key"`
}

func keyJSON(k *apikey.Key) KeyJSON {
	v := k.Snapshot()
	scopes := make([]string, len(v.Scopes))
	for i, s := range v.Scopes {
		scopes[i] = string(s)
	}
	return KeyJSON{
		ID: v.ID.String(), Name: v.Name, Scopes: scopes, Queues: nonNil(v.Queues),
		WorkerPrefix: optString(v.WorkerPrefix), CreatedAt: v.CreatedAt.UTC(),
		LastUsedAt: optTime(v.LastUsedAt), ExpiresAt: optTime(v.ExpiresAt), RevokedAt: optTime(v.RevokedAt),
	}
}

type createKeyRequest struct {
	Name             string     `json:"name"`
	Scopes           []string   `json:"scopes"`
	Queues           []string   `json:"queues"`
	WorkerPrefix     string     `json:"worker_prefix"`
	ExpiresAt        *timeValue `json:"expires_at"`
	ExpiresInSeconds *int64     `json:"expires_in_seconds"`
}

func (q createKeyRequest) params() apikey.CreateParams {
	p := apikey.CreateParams{Name: q.Name, Queues: q.Queues, WorkerPrefix: q.WorkerPrefix, ExpiresAt: q.ExpiresAt.get()}
	for _, s := range q.Scopes {
		p.Scopes = append(p.Scopes, apikey.Scope(s))
	}
	if n := q.ExpiresInSeconds; n != nil {
		p.ExpiresIn = -1 // out of range unless positive: the domain names the field
		if *n > 0 && *n <= int64((100*365*24*time.Hour)/time.Second) {
			p.ExpiresIn = time.Duration(*n) * time.Second
		}
	}
	return p
}

func (s *Server) handleCreateKey(w http.ResponseWriter, r *http.Request) {
	var req createKeyRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	k, token, err := s.keys.Create(r.Context(), req.params())
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/admin/v1/keys/"+k.ID().String())
	w.Header().Set("Cache-Control", "no-store") // the token must not linger in caches
	writeJSON(w, http.StatusCreated, CreatedKeyJSON{KeyJSON: keyJSON(k), Key: token})
}

type keysResponse struct {
	Keys []KeyJSON `json:"keys"`
}

func (s *Server) handleListKeys(w http.ResponseWriter, r *http.Request) {
	ks, err := s.keys.List(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]KeyJSON, len(ks))
	for i, k := range ks {
		out[i] = keyJSON(k)
	}
	writeJSON(w, http.StatusOK, keysResponse{Keys: out})
}

func (s *Server) handleRevokeKey(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(mux.Vars(r)["id"])
	if err != nil {
		writeError(w, r, apikey.ErrNotFound) // a malformed id names no key
		return
	}
	k, err := s.keys.Revoke(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, keyJSON(k))
}
