package cluster

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serviceAccountToken asks the TokenRequest API for a token of ns/name, as
// the kubelet does for a pod's projected token.
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := srv.admin(t).CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// agentToken is a token of the ServiceAccount the chart created.
func agentToken(t *testing.T) string {
	t.Helper()
	sa := theRelease(t).object("ServiceAccount")
	if sa == nil {
		t.Fatal("the chart created no ServiceAccount")
	}
	return serviceAccountToken(t, sa.GetNamespace(), sa.GetName())
}

// TestServiceAccountLeastPrivilege asks the server what the chart's
// ServiceAccount may do: get, list and watch pods, get a node (its pool
// label), and nothing else a node agent could abuse. Then it makes real requests with the token: the pod
// list of a node is served, the rest is refused.
func TestServiceAccountLeastPrivilege(t *testing.T) {
	logVersion(t)
	cs, err := kubernetesClient(srv.restConfig(agentToken(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	type access struct {
		verb, group, resource, sub, ns string
	}
	allowed := []access{
		{"get", "", "pods", "", ""}, {"list", "", "pods", "", ""}, {"watch", "", "pods", "", ""},
		{"list", "", "pods", "", "kube-system"}, {"watch", "", "pods", "", releaseNS},
		{"get", "", "nodes", "", ""},
	}
	refused := []access{
		{"create", "", "pods", "", ""}, {"update", "", "pods", "", ""}, {"patch", "", "pods", "", ""},
		{"delete", "", "pods", "", ""}, {"deletecollection", "", "pods", "", ""},
		{"update", "", "pods", "status", ""}, {"create", "", "pods", "exec", ""}, {"get", "", "pods", "log", ""},
		{"create", "", "pods", "eviction", ""}, {"create", "", "pods", "ephemeralcontainers", ""},
		{"get", "", "secrets", "", releaseNS}, {"list", "", "secrets", "", ""}, {"list", "", "configmaps", "", ""},
		{"list", "", "nodes", "", ""}, {"watch", "", "nodes", "", ""}, {"get", "", "nodes", "proxy", ""}, {"get", "", "nodes", "status", ""},
		{"update", "", "nodes", "", ""}, {"patch", "", "nodes", "", ""}, {"delete", "", "nodes", "", ""},
		{"list", "", "namespaces", "", ""}, {"list", "", "services", "", ""}, {"create", "", "events", "", ""},
		{"create", "", "serviceaccounts", "token", releaseNS},
		{"list", "apps", "daemonsets", "", ""}, {"update", "apps", "daemonsets", "", releaseNS},
		{"bind", "rbac.authorization.k8s.io", "clusterroles", "", ""}, {"escalate", "rbac.authorization.k8s.io", "clusterroles", "", ""},
		{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", ""},
		{"create", "coordination.k8s.io", "leases", "", releaseNS},
		{"impersonate", "", "serviceaccounts", "", ""},
	}
	check := func(a access, want bool) {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Namespace: a.ns,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectAccessReview: %v", err)
		}
		if r.Status.Allowed != want {
			t.Errorf("%s %s/%s (subresource %q) in namespace %q: allowed %v, want %v (%s)", a.verb, a.group, a.resource, a.sub, a.ns, r.Status.Allowed, want, r.Status.Reason)
		}
	}
	for _, a := range allowed {
		check(a, true)
	}
	for _, a := range refused {
		check(a, false)
	}

	// Real requests with the same token.
	if _, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"}); err != nil {
		t.Errorf("listing the pods of node-a: %v", err)
	}
	if _, err := cs.CoreV1().Secrets(releaseNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing secrets: got %v, want Forbidden", err)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("getting node %s: %v", nodeName, err)
	}
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing nodes: got %v, want Forbidden", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: releaseNS},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}
	if _, err := cs.CoreV1().Pods(releaseNS).Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("creating a pod: got %v, want Forbidden", err)
	}
}
